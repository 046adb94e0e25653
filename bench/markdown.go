package bench

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// results.md: the measurements of a Result as tables, against the targets.

func pct(p float64) string { return fmt.Sprintf("%g%%", p) }

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// bridgePhases are the phases that run the bridge, the Temporal server or
// a consumer it is compared with on the short schedule.
var bridgePhases = []string{"schedule", "inline", "ordering", "history", "peer", "retrytopics", "workflow", "handoff"}

// ranAny reports whether any of phases was run.
func (r *Result) ranAny(phases ...string) bool {
	return slices.ContainsFunc(phases, r.ran)
}

// Markdown is results.md: the measurements, the ratios against the targets.
func (r *Result) Markdown() string {
	var b strings.Builder
	inline, peer, rtopics := r.Inline, r.Peer, r.RetryTopics
	if !r.ran("inline") {
		inline = nil
	}
	if !r.ran("peer") {
		peer = nil
	}
	if !r.ran("retrytopics") {
		rtopics = nil
	}
	kind := "full"
	if r.Quick {
		kind = "quick (small sizes: not comparable with a full run)"
	}
	fmt.Fprintf(&b, "# causet bench — %s run\n\n", kind)
	if len(r.Phases) > 0 {
		fmt.Fprintf(&b, "Phases run (CAUSET_BENCH_PHASES): %s.\n\n", strings.Join(r.Phases, ", "))
	}
	fmt.Fprintf(&b, "Machine: %d cores, %.0f GiB memory, %s, %s. Kafka: %s. PostgreSQL: %s. Temporal: %s.\n\n",
		r.Machine.Cores, r.Machine.MemoryGiB, r.Machine.OS, r.Machine.GoVersion, r.Machine.Kafka, r.Machine.Postgres, r.Machine.Temporal)
	if r.ranAny(bridgePhases...) {
		fmt.Fprintf(&b, "Retry schedule of the inline, workflow-mode, peer and retry-topics runs: **%s** (short, so the run finishes; the schedule-accuracy row uses the default 5 attempts, 1s × 2, ≤ 30s).\n\n", r.ShortSchedule)
		fmt.Fprintf(&b, "Bridge: %s CAUSET_ORDERING=%s.\n\n", r.BridgeProcess, r.Ordering)
		if r.Sizes.Reps > 1 {
			fmt.Fprintf(&b, "The ceiling, the 0%% and 1%% inline drains, the 0%% peer drain and the retry-topics runs ran %d times each (fresh topics, groups and bridge); the table shows the median, results.json every repetition.\n\n", r.Sizes.Reps)
		}
	}

	var rows []string
	row := func(format string, args ...any) { rows = append(rows, fmt.Sprintf(format, args...)) }
	if r.ran("ceiling") {
		row("| ceiling: pgx batched upsert (500/tx; best of 1 conn %s/s and %d conns %s/s) | %d | 0 | %s | | | |",
			num(r.Ceiling.RowsPerSecOneConn), r.Sizes.Partitions, num(r.Ceiling.RowsPerSecParallel), r.Ceiling.Rows, num(r.Ceiling.RowsPerSec))
		row("| diagnostic: the same plus a dedupe-ledger row per event (%d conns) | %d | 0 | %s | | | |",
			r.Sizes.Partitions, r.Ceiling.Rows, num(r.Ceiling.WithLedgerPerSec))
	}
	for _, x := range inline {
		row("| inline mode, %s failing | %d | %d | %s | %.1f | %.1f | %.0f |",
			pct(x.FailPct), x.Events, x.Failing, num(x.EventsPerSec), x.P50Ms, x.P99Ms, x.PeakRSSMB)
	}
	if r.ran("workflow") {
		row("| workflow mode (every event a workflow), 0%% failing | %d | 0 | %s | | | %.0f |",
			r.Workflow.Events, num(r.Workflow.EventsPerSec), r.Workflow.PeakRSSMB)
	}
	for _, x := range peer {
		row("| peer: in-place retry consumer, %s failing (%d dead-lettered) | %d | %d | %s | | | |",
			pct(x.FailPct), x.DeadLettered, x.Events, x.Failing, num(x.EventsPerSec))
	}
	for _, x := range rtopics {
		row("| retry topics: a delay topic per retry, %s failing (%d dead-lettered after %d delay-topic attempts) | %d | %d | %s | | | |",
			pct(x.FailPct), x.DeadLettered, x.Retried, x.Events, x.Failing, num(x.EventsPerSec))
	}
	if r.ran("handoff") {
		row("| hand-off at 100%% failing: bridge workflow starts/s (raw ExecuteWorkflow %s/s, %d concurrent) | %d | %d | %s | | | %.0f |",
			num(r.Handoff.RawStartsPerSec), r.Handoff.Concurrency, r.Handoff.Events, r.Handoff.Events, num(r.Handoff.BridgeStartsPerSec), r.InFlight.PeakRSSMB)
	}
	if len(rows) > 0 {
		b.WriteString("| measurement | events | failing | events/s | p50 ms | p99 ms | bridge peak RSS MB |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		b.WriteString(strings.Join(rows, "\n") + "\n\n")
	}

	if r.ran("handoff") && r.Handoff.EagerPerSec > 0 {
		fmt.Fprintf(&b, "Eager workflow start: %d raw starts on a queue the bench's worker polls ran at %s/s without and %s/s with EnableEagerStart (%d concurrent; the Temporal server used %.2f and %.2f cores).\n\n",
			r.Handoff.Events/2, num(r.Handoff.PolledPerSec), num(r.Handoff.EagerPerSec), r.Handoff.Concurrency, r.Handoff.PolledCPU.Temporal, r.Handoff.EagerCPU.Temporal)
	}
	r.serverMarkdown(&b)
	if len(rtopics) > 0 {
		b.WriteString("Retry topics: events/s runs to the last event applied or dead-lettered, so a run with failures includes the last failure's whole schedule; the events topic alone (every record applied or forwarded to a delay topic, produce acknowledged: the point at which the inline figure stops, at the durable hand-off) drained at")
		for i, x := range rtopics {
			sep := ","
			if i == len(rtopics)-1 {
				sep = "."
			}
			fmt.Fprintf(&b, " %s events/s at %s failing%s", num(x.DrainEventsPerSec), pct(x.FailPct), sep)
		}
		for _, x := range rtopics {
			if x.Retried > 0 {
				fmt.Fprintf(&b, " At %s failing, the worst delay-topic attempt started %.3f s after its due time.", pct(x.FailPct), x.LatenessMaxS)
			}
		}
		b.WriteString("\n\n")
	}

	if len(inline) > 0 {
		b.WriteString("Latency (produce → row visible) is measured in a paced phase after each drain, at the rate shown, over the successful events:\n\n")
		b.WriteString("| inline failing | paced events/s | samples | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|\n")
		for _, x := range inline {
			fmt.Fprintf(&b, "| %s | %.0f | %d | %.1f | %.1f |\n", pct(x.FailPct), x.LatencyRate, x.LatencySamples, x.P50Ms, x.P99Ms)
		}
		b.WriteString("\n")
	}

	if r.ranAny(bridgePhases...) {
		b.WriteString("Where the CPU went during each measurement, in cores of the machine's " + strconv.Itoa(r.Machine.Cores) + " (median repetition; \"other\" is load outside this run, e.g. other jobs on a shared machine):\n\n")
		b.WriteString("| measurement | machine busy | bridge | PostgreSQL | Temporal server | bench process (kfake, peers, worker) | other |\n|---|---:|---:|---:|---:|---:|---:|\n")
		cpuRow := func(name string, c CPUUse) {
			other := max(0, c.MachineBusy-c.Bridge-c.Postgres-c.Temporal-c.Bench)
			fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name, c.MachineBusy, c.Bridge, c.Postgres, c.Temporal, c.Bench, other)
		}
		for _, x := range inline {
			cpuRow("inline, "+pct(x.FailPct)+" failing", medianCPU(x.EventsPerSecReps, x.CPUReps))
		}
		if r.ran("history") {
			for _, s := range r.History.Steps {
				cpuRow("inline, 0% failing, "+countLabel(s.PriorEvents)+" prior events in the ledger", medianCPU(s.Inline.EventsPerSecReps, s.Inline.CPUReps))
			}
		}
		if r.ran("workflow") {
			cpuRow("workflow mode", r.Workflow.CPU)
		}
		for _, x := range peer {
			cpuRow("peer, "+pct(x.FailPct)+" failing", medianCPU(x.EventsPerSecReps, x.CPUReps))
		}
		for _, x := range rtopics {
			cpuRow("retry topics, "+pct(x.FailPct)+" failing", medianCPU(x.EventsPerSecReps, x.CPUReps))
		}
		if r.ran("handoff") {
			cpuRow("hand-off, bridge", r.Handoff.BridgeCPU)
			cpuRow("hand-off, raw ExecuteWorkflow (first half)", r.Handoff.RawCPU)
			if r.Handoff.EagerPerSec > 0 {
				cpuRow("raw ExecuteWorkflow on a polled queue", r.Handoff.PolledCPU)
				cpuRow("raw ExecuteWorkflow on a polled queue, eager start", r.Handoff.EagerCPU)
			}
		}
		b.WriteString("\n")
	}

	if r.ran("schedule") {
		fmt.Fprintf(&b, "Schedule accuracy (default schedule, %d failing events, inline mode, real dev server): expected offsets %s s;", r.Schedule.Events, floats(r.Schedule.ExpectedS, 0))
		for i, o := range r.Schedule.ObservedS {
			fmt.Fprintf(&b, " event %d at %s s;", i+1, floats(o, 3))
		}
		fmt.Fprintf(&b, " worst lateness %.3f s.\n\n", r.Schedule.LatenessMaxS)
		if r.Schedule.DeadLetter.Events > 0 {
			fmt.Fprintf(&b, "What a dead letter of the default schedule cost Temporal (the first event's workflow, its dead letter published): %s.\n\n", r.Schedule.DeadLetter)
		}
	}
	if r.ran("handoff") {
		fmt.Fprintf(&b, "In flight: bridge RSS %.0f MB (peak %.0f MB) with %d failures handed off and still retrying.\n\n", r.InFlight.RSSMB, r.InFlight.PeakRSSMB, r.InFlight.Failures)
	}
	if r.ran("intents") {
		r.intentsMarkdown(&b)
	}
	if r.ran("history") && len(r.History.Steps) > 0 {
		r.historyMarkdown(&b)
	}
	if r.ran("ordering") && r.OrderingPhase.Events > 0 {
		r.orderingMarkdown(&b)
	}

	b.WriteString("| ratio | result | target | met |\n|---|---:|---|---|\n")
	for _, t := range r.Targets() {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, num(t.Value), t.Goal, met)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	b.WriteString("\n")
	r.unitsMarkdown(&b)
	fmt.Fprintf(&b, "`%s`\n\n`%s`\n", r.UnitsLine(), r.SummaryLine())
	return b.String()
}

// intentsMarkdown is the write path's section of results.md.
func (r *Result) intentsMarkdown(b *strings.Builder) {
	x := r.Intents
	b.WriteString("## Intents (write path)\n\n")
	fmt.Fprintf(b, "%d intents per measurement from %d concurrent clients over %d entities (each client owns %d, so no two clients wait for one entity's sequence row), on a pool of %d PostgreSQL connections; %s.",
		x.Intents, x.Clients, x.Entities, x.Entities/max(x.Clients, 1), x.PoolConns, x.Mix)
	if len(x.IntentsPerSecReps) > 1 {
		fmt.Fprintf(b, " Each measurement ran %d times (in rotating order); the table shows the median, results.json every repetition; intents/ledger is the median of the repetitions' ratios.", len(x.IntentsPerSecReps))
	}
	b.WriteString("\n\n")
	b.WriteString("| measurement | intents or events | per second | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| runtime: client.Submit → POST /v1/intents (in-process server, loopback) → ledger, one transaction per intent | %d | %s | %.1f | %.1f |\n",
		x.Intents, num(x.IntentsPerSec), x.P50Ms, x.P99Ms)
	fmt.Fprintf(b, "| ceiling: the same rows (the ledger's record statement: sequence upsert, event row, intent row) written directly with pgx, one transaction (pgx.BeginFunc) per intent, same clients and pool | %d | %s | %.1f | %.1f |\n",
		x.Intents, num(x.LedgerPerSec), x.LedgerP50Ms, x.LedgerP99Ms)
	if len(x.PipelinedPerSecReps) > 0 {
		fmt.Fprintf(b, "| diagnostic: the ceiling pipelined, BEGIN, the statement and COMMIT in one round trip | %d | %s | %.1f | %.1f |\n",
			x.Intents, num(x.PipelinedPerSec), x.PipelinedP50Ms, x.PipelinedP99Ms)
	}
	fmt.Fprintf(b, "| diagnostic: the ledger's statements directly with pgx, one round trip each (BEGIN, intent lock, lookup, FollowArtist's read, the record statement, COMMIT), same clients and pool | %d | %s | %.1f | %.1f |\n",
		x.Intents, num(x.StepwisePerSec), x.StepwiseP50Ms, x.StepwiseP99Ms)
	fmt.Fprintf(b, "| relay: events published (Kafka-acknowledged and marked) draining the backlog, batch %d | %d | %s | | |\n\n",
		x.RelayBatch, x.RelayEvents, num(x.RelayEventsPerSec))
	b.WriteString("Where the CPU went, in cores (median repetition; the bench process holds the runtime server, the clients, the relay and kfake):\n\n")
	b.WriteString("| measurement | machine busy | PostgreSQL | bench process | other |\n|---|---:|---:|---:|---:|\n")
	for _, c := range []struct {
		name  string
		rates []float64
		cpus  []CPUUse
	}{{"runtime", x.IntentsPerSecReps, x.CPUReps}, {"ceiling (direct pgx)", x.LedgerPerSecReps, x.LedgerCPUReps},
		{"diagnostic: ceiling pipelined", x.PipelinedPerSecReps, x.PipelinedCPUReps},
		{"diagnostic: ledger statements one by one", x.StepwisePerSecReps, x.StepwiseCPUReps}, {"relay", x.RelayEventsPerSecReps, x.RelayCPUReps}} {
		u := medianCPU(c.rates, c.cpus)
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f |\n", c.name, u.MachineBusy, u.Postgres, u.Bench, max(0, u.MachineBusy-u.Postgres-u.Bench-u.Temporal-u.Bridge))
	}
	b.WriteString("\n")
	if len(x.NotSuccess) > 0 {
		keys := slices.Sorted(maps.Keys(x.NotSuccess))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.0f", k, x.NotSuccess[k])
		}
		fmt.Fprintf(b, "The runtime also answered: %s (the client re-submits after a 503).\n\n", strings.Join(parts, ", "))
	}
}

// medianCPU is the CPU use of the repetition whose rate is the median.
func medianCPU(rates []float64, cpus []CPUUse) CPUUse {
	if len(rates) == 0 || len(rates) != len(cpus) {
		return CPUUse{}
	}
	idx := make([]int, len(rates))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return rates[idx[a]] < rates[idx[b]] })
	return cpus[idx[len(idx)/2]]
}

func floats(v []float64, prec int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.*f", prec, x)
	}
	return strings.Join(s, ", ")
}

// serverRow is one run that started workflows, with the Temporal server's
// own figures for it.
type serverRow struct {
	what    string
	perSec  float64
	figures *ServerFigures
}

// serverRows are the runs of r that have the server's figures.
func (r *Result) serverRows() []serverRow {
	var rows []serverRow
	for _, x := range r.Inline {
		if x.Server != nil {
			rows = append(rows, serverRow{"inline, " + pct(x.FailPct) + " failing (drain)", x.StartsPerSec, x.Server})
		}
	}
	if r.ran("handoff") {
		h := r.Handoff
		for _, x := range []serverRow{{"hand-off, bridge at 100 % failing", h.BridgeStartsPerSec, h.BridgeServer},
			{"hand-off, raw ExecuteWorkflow (first half)", h.RawBeforePerSec, h.RawServer},
			{"raw ExecuteWorkflow on a polled queue", h.PolledPerSec, h.PolledServer},
			{"raw ExecuteWorkflow on a polled queue, eager start", h.EagerPerSec, h.EagerServer}} {
			if x.figures != nil {
				rows = append(rows, x)
			}
		}
	}
	return rows
}

// serverMarkdown is the Temporal server's own figures for the runs that
// started workflows, from its Prometheus endpoint.
func (r *Result) serverMarkdown(b *strings.Builder) {
	rows := r.serverRows()
	if len(rows) == 0 {
		return
	}
	b.WriteString("The Temporal server's own figures (its Prometheus endpoint, read before and after each run; latency at the frontend, p50 and p99 as latency-bucket bounds; persistence is every call the server made in the run, per start):\n\n")
	b.WriteString("| run | starts | starts/s | start mean ms | p50 ≤ ms | p99 ≤ ms | history ms | create-execution write ms | persistence calls / start | persistence ms / start | server CPU ms / start | starts/s per server core |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range rows {
		f := x.figures
		fmt.Fprintf(b, "| %s | %.0f | %s | %.1f | %s | %s | %.1f | %.2f | %.1f | %.1f | %.2f | %s |\n", x.what, f.Starts, num(x.perSec),
			f.StartMeanMs, boundMs(f.StartP50Ms), boundMs(f.StartP99Ms), f.HistoryStartMeanMs, f.CreateMeanMs,
			f.PersistenceCallsPerStart, f.PersistenceMsPerStart, f.CPUMsPerStart, num(f.StartsPerCore))
	}
	b.WriteString("\n")
}

// SideBySide is the Temporal figures of several runs of the same phases
// against different servers (the dev server's, a cluster's), one column
// per run: for each run that started workflows, starts/s and the server's
// own figures; then the hand-off over raw ratio and the default schedule's
// worst lateness.
func SideBySide(labels []string, rs []*Result) string {
	var b strings.Builder
	b.WriteString("| run | figure |")
	for _, l := range labels {
		fmt.Fprintf(&b, " %s |", l)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(labels)) + "\n")
	line := func(run, figure string, cell func(*Result) string) {
		fmt.Fprintf(&b, "| %s | %s |", run, figure)
		for _, r := range rs {
			fmt.Fprintf(&b, " %s |", cell(r))
		}
		b.WriteString("\n")
	}
	line("", "Temporal", func(r *Result) string { return r.Machine.Temporal })
	var runs []string
	for _, r := range rs {
		for _, x := range r.serverRows() {
			if !slices.Contains(runs, x.what) {
				runs = append(runs, x.what)
			}
		}
	}
	rowOf := func(r *Result, what string) *serverRow {
		for _, x := range r.serverRows() {
			if x.what == what {
				return &x
			}
		}
		return nil
	}
	figures := []struct {
		name string
		val  func(serverRow) string
	}{
		{"starts/s", func(x serverRow) string { return num(x.perSec) }},
		{"start mean ms (history part)", func(x serverRow) string {
			return fmt.Sprintf("%.1f (%.1f)", x.figures.StartMeanMs, x.figures.HistoryStartMeanMs)
		}},
		{"p99 ≤ ms", func(x serverRow) string { return boundMs(x.figures.StartP99Ms) }},
		{"create-execution write ms", func(x serverRow) string { return fmt.Sprintf("%.2f", x.figures.CreateMeanMs) }},
		{"persistence calls / start", func(x serverRow) string { return fmt.Sprintf("%.1f", x.figures.PersistenceCallsPerStart) }},
		{"persistence ms / start", func(x serverRow) string { return fmt.Sprintf("%.1f", x.figures.PersistenceMsPerStart) }},
		{"server CPU ms / start", func(x serverRow) string { return fmt.Sprintf("%.2f", x.figures.CPUMsPerStart) }},
		{"starts/s per server core", func(x serverRow) string { return num(x.figures.StartsPerCore) }},
	}
	for _, what := range runs {
		for _, f := range figures {
			line(what, f.name, func(r *Result) string {
				if x := rowOf(r, what); x != nil {
					return f.val(*x)
				}
				return "–"
			})
		}
	}
	line("hand-off", "bridge starts/s over raw", func(r *Result) string {
		if !r.ran("handoff") || r.Handoff.RawStartsPerSec == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", ratio(r.Handoff.BridgeStartsPerSec, r.Handoff.RawStartsPerSec))
	})
	line("schedule (default)", "worst attempt late by, s", func(r *Result) string {
		if !r.ran("schedule") || r.Schedule.Events == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", r.Schedule.LatenessMaxS)
	})
	return b.String()
}

// orderingMarkdown is the ordering phase's section of results.md.
func (r *Result) orderingMarkdown(b *strings.Builder) {
	x := r.OrderingPhase
	b.WriteString("## Entity ordering with failures on shared keys\n\n")
	fmt.Fprintf(b, "%d events over %d keys; %d of them (%.1f %%) fail on every attempt, each on a key of its own among %d keys that carry successful events before and after it; %d events are of keys that never fail. A real worker on the default schedule (%.0f s from attempt 1 to the last); the same events with CAUSET_ORDERING=none in the same run. Times run from the first event applied.\n\n",
		x.Events, x.Keys, x.Failing, 100*float64(x.Failing)/float64(max(x.Events, 1)), x.FailingKeys, x.Clean, x.ScheduleS)
	b.WriteString("| | none | entity (default) |\n|---|---:|---:|\n")
	fmt.Fprintf(b, "| events of keys that never fail: events/s | %.0f | %.0f |\n", x.NoneCleanEP, x.EntityCleanEP)
	fmt.Fprintf(b, "| every successful event applied (s) | %.2f | %.2f |\n\n", x.NoneDrainS, x.EntityAllS)
	if len(x.Rounds) > 1 {
		fmt.Fprintf(b, "Medians of %d rounds, none then entity in each:\n\n", len(x.Rounds))
		b.WriteString("| round | none: clean events/s | entity: clean events/s | entity/none | none: every success (s) | entity: every success (s) |\n|---:|---:|---:|---:|---:|---:|\n")
		for i, r := range x.Rounds {
			fmt.Fprintf(b, "| %d | %.0f | %.0f | %.2f | %.2f | %.2f |\n", i+1, r.NoneCleanEP, r.EntityCleanEP,
				ratio(r.EntityCleanEP, r.NoneCleanEP), r.NoneDrainS, r.EntityAllS)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "Releases: %d events parked behind one failing head were all applied %.2f s after it dead-lettered; %d events behind %d heads settled together (their rows' state set as the worker sets it; their retry workflows wait on a queue no worker polls, so no attempt runs beside the release) were applied in %.2f s (%.0f events/s).\n\n",
		x.HotParked, x.HotDrainS, x.WideParked, x.WideKeys, x.WideDrainS, x.WideEPS)
}
