package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fixedResult is a full run's worth of made-up figures.
func fixedResult() *Result {
	r := &Result{
		Machine:       Machine{Cores: 2, MemoryGiB: 23.5, GoVersion: "go1.26", OS: "linux/amd64", Kafka: "kfake", Postgres: "15", Temporal: "dev server"},
		Sizes:         sizesFor(false),
		ShortSchedule: "5 attempts, 20ms × 2, max 1s",
		BridgeProcess: "child process",
		Ordering:      "entity",
		Ceiling:       Ceiling{Rows: 100000, RowsPerSec: 60000, RowsPerSecOneConn: 53000, RowsPerSecParallel: 60000, WithLedgerPerSec: 40000},
		Inline: []InlineRun{
			{FailPct: 0, Events: 100000, EventsPerSec: 33000, EventsPerSecReps: []float64{30000, 33000, 35000}, CPUReps: []CPUUse{{}, {MachineBusy: 1.9, Bridge: 0.8}, {}}, P50Ms: 4.2, P99Ms: 20.5, PeakRSSMB: 110},
			{FailPct: 1, Events: 100000, Failing: 1000, EventsPerSec: 24600, P50Ms: 4.8, P99Ms: 40, PeakRSSMB: 120},
			{FailPct: 10, Events: 30000, Failing: 3000, EventsPerSec: 2800, P50Ms: 1.5, P99Ms: 50, PeakRSSMB: 105},
		},
		Workflow: WorkflowRun{Events: 500, EventsPerSec: 50},
		Peer: []PeerRun{
			{FailPct: 0, Events: 100000, EventsPerSec: 50000},
			{FailPct: 1, Events: 20000, Failing: 200, DeadLettered: 200, EventsPerSec: 820},
		},
		RetryTopics: []RetryTopicsRun{
			{FailPct: 0, Events: 100000, EventsPerSec: 48000, EventsPerSecReps: []float64{48000}, DrainEventsPerSec: 48000, CPUReps: []CPUUse{{MachineBusy: 1.7, Bench: 0.6}}},
			{FailPct: 1, Events: 100000, Failing: 1000, DeadLettered: 1000, Retried: 4000, EventsPerSec: 4100, DrainEventsPerSec: 16400, LatenessMaxS: 0.0421},
		},
		Schedule: ScheduleRun{Events: 1, ExpectedS: []float64{0, 1, 3, 7, 15}, ObservedS: [][]float64{{0, 1.013, 3.024, 7.037, 15.051}}, LatenessMaxS: 0.051},
		Handoff:  HandoffRun{Events: 10000, Concurrency: 256, BridgeStartsPerSec: 270, RawStartsPerSec: 300},
		OrderingPhase: OrderingRun{Events: 20000, Keys: 1000, Failing: 200, FailingKeys: 200, Clean: 16000, ScheduleS: 15,
			NoneDrainS: 1.5, NoneCleanS: 1.4, NoneCleanEP: 11400, EntityCleanS: 1.6, EntityCleanEP: 10000, EntityAllS: 18.2,
			HotParked: 2000, HotDrainS: 0.4, WideKeys: 500, WideParked: 10000, WideDrainS: 0.8, WideEPS: 12500},
		InFlight: InFlightRun{Failures: 10000, RSSMB: 74.6, PeakRSSMB: 101},
		Intents: IntentsRun{Intents: 25600, Clients: 64, Entities: 6400, PoolConns: 64, Mix: "3 PlayTrack : 1 FollowArtist",
			IntentsPerSec: 1500, IntentsPerSecReps: []float64{1400, 1500, 1600}, P50Ms: 40, P99Ms: 123.44,
			CPUReps:      []CPUUse{{}, {MachineBusy: 1.95, Postgres: 1.1, Bench: 0.8}, {}},
			LedgerPerSec: 2500, LedgerPerSecReps: []float64{2500}, LedgerP50Ms: 25, LedgerP99Ms: 60, LedgerCPUReps: []CPUUse{{MachineBusy: 1.9}},
			RelayEvents: 51200, RelayBatch: 500, RelayEventsPerSec: 20400.4, RelayEventsPerSecReps: []float64{20400.4}, RelayCPUReps: []CPUUse{{}},
			NotSuccess: map[string]float64{"unavailable": 2}},
		History: HistoryRun{Hours: 240, HorizonHours: 336, Steps: []HistoryStep{
			{PriorEvents: 0, SettleSeconds: 0.3, LedgerBytes: 3_200_000, Partitions: 385,
				Inline: InlineRun{Events: 100000, EventsPerSec: 32000, EventsPerSecReps: []float64{31000, 32000, 33000},
					CPUReps: []CPUUse{{}, {MachineBusy: 1.85, Bridge: 0.75, Postgres: 0.9}, {}}, P50Ms: 4, P99Ms: 21, PeakRSSMB: 112}},
			{PriorEvents: 10_000_000, Loaded: 10_000_000, LoadSeconds: 40, LoadRowsPerSec: 250000, SettleSeconds: 20,
				LedgerRows: 10_000_000, LedgerBytes: 1_300_000_000, Partitions: 385, BytesPerEvent: 130,
				Inline: InlineRun{Events: 100000, EventsPerSec: 31000, EventsPerSecReps: []float64{31000}, P50Ms: 4.1, P99Ms: 22, PeakRSSMB: 113}},
			{PriorEvents: 50_000_000, Loaded: 40_000_000, LoadSeconds: 160, LoadRowsPerSec: 250000, SettleSeconds: 90,
				LedgerRows: 50_000_000, LedgerBytes: 6_500_000_000, Partitions: 385, BytesPerEvent: 130,
				Inline: InlineRun{Events: 100000, EventsPerSec: 30400, EventsPerSecReps: []float64{30400}, P50Ms: 4.3, P99Ms: 23, PeakRSSMB: 115}},
		}, Prune: HistoryPrune{HorizonHours: 24, Seconds: 0.8, Dropped: 264, RowsBefore: 50_330_000, RowsAfter: 15_330_000,
			BytesBefore: 6_540_000_000, BytesAfter: 1_990_000_000, PartitionsBefore: 385, PartitionsAfter: 121}},
	}
	r.ComputeRatios()
	return r
}

func TestSummaryLine(t *testing.T) {
	r := fixedResult()
	require.Equal(t,
		"bench: inline/raw=0.55 inline1%/raw=0.41 inline/workflow=660.0 inline1%/peer1%=30.0 handoff/raw=0.90 lateness_max=0.05s rss_10k=75MB intents/ledger=0.60 intents_p99=123.4ms relay_eps=20400 inline1%/retrytopics1%=1.50 history50m/0=0.95 ledger_bytes_per_event=130 ordering_clean/none=0.88 ordering_late=3.2s/8.0s hot_drain=0.40s release_eps=12500",
		r.SummaryLine())
	// The format CI and BENCHMARKS.md rely on.
	re := regexp.MustCompile(`^bench: inline/raw=\d+\.\d\d inline1%/raw=\d+\.\d\d inline/workflow=\d+\.\d inline1%/peer1%=\d+\.\d handoff/raw=\d+\.\d\d lateness_max=\d+\.\d\ds rss_10k=\d+MB intents/ledger=\d+\.\d\d intents_p99=\d+\.\dms relay_eps=\d+ inline1%/retrytopics1%=\d+\.\d\d history50m/0=\d+\.\d\d ledger_bytes_per_event=\d+ ordering_clean/none=\d+\.\d\d ordering_late=\d+\.\ds/\d+\.\ds hot_drain=\d+\.\d\ds release_eps=\d+$`)
	require.Regexp(t, re, r.SummaryLine())
	require.Regexp(t, re, (&Result{}).SummaryLine(), "an empty result still prints the line (zeros)")
}

func TestTargets(t *testing.T) {
	r := fixedResult()
	met := map[string]bool{}
	for _, tg := range r.Targets() {
		met[tg.Name] = tg.Met
	}
	require.Equal(t, map[string]bool{
		"inline/raw": true, "inline1%/raw": true, "inline/workflow": true, "inline1%/peer1%": true, "inline1%/retrytopics1%": true,
		"handoff/raw": true, "lateness_max (s)": true, "RSS at 10000 in flight (MB)": true, "intents/ledger": true,
		"history50m/0": true, "ledger_bytes_per_event": true,
		"ordering clean keys: entity/none": true, "ordering: every success less the schedule (s)": true,
		"2000 parked behind one head: drained after it settled (s)": true, "release across keys (events/s)": true,
	}, met)
	r.Ratios.HandoffRaw = 0.7
	require.False(t, r.Targets()[5].Met)
	r.Ratios.IntentsLedger = 0.49
	require.False(t, r.Targets()[8].Met)
	r.Ratios.Inline1RetryTopics1 = 0.99
	require.Equal(t, Target{"inline1%/retrytopics1%", 0.99, "≥ 1.0", false}, r.Targets()[4])
	require.Equal(t, Target{"ledger_bytes_per_event", 130,
		"stops growing once the horizon is reached (pruned at a 24h horizon: 6.54 GB → 1.99 GB, 264 partitions dropped)", true}, r.Targets()[10])
	r.Ratios.History50m0 = 0.79
	require.Equal(t, Target{"history50m/0", 0.79, "≥ 0.8", false}, r.Targets()[9])

	// A run of some phases has the targets of those only.
	r.Phases = []string{"intents"}
	require.Equal(t, []Target{{"intents/ledger", 0.49, "≥ 0.5", false}}, r.Targets())
}

func TestJSON(t *testing.T) {
	r := fixedResult()
	data, err := r.JSON()
	require.NoError(t, err)
	var back Result
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, *r, back)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	require.Contains(t, raw, "ratios")
	require.Equal(t, 0.9, raw["ratios"].(map[string]any)["handoffRaw"])
	require.Equal(t, 1.5, raw["ratios"].(map[string]any)["inline1RetryTopics1"])
	require.Equal(t, 0.95, raw["ratios"].(map[string]any)["history50m0"])
	require.Equal(t, 130.0, raw["ratios"].(map[string]any)["ledgerBytesPerEvent"])
	require.Equal(t, 264.0, raw["history"].(map[string]any)["prune"].(map[string]any)["dropped"])
}

func TestMarkdown(t *testing.T) {
	md := fixedResult().Markdown()
	for _, want := range []string{
		"| measurement | events | failing | events/s | p50 ms | p99 ms | bridge peak RSS MB |",
		"| inline mode, 1% failing | 100000 | 1000 | 24600 | 4.8 | 40.0 | 120 |",
		"| workflow mode (every event a workflow), 0% failing | 500 | 0 | 50.0 |",
		"| peer: in-place retry consumer, 1% failing (200 dead-lettered) | 20000 | 200 | 820 |",
		"| retry topics: a delay topic per retry, 1% failing (1000 dead-lettered after 4000 delay-topic attempts) | 100000 | 1000 | 4100 |",
		"drained at 48000 events/s at 0% failing, 16400 events/s at 1% failing. At 1% failing, the worst delay-topic attempt started 0.042 s after its due time.",
		"| retry topics, 0% failing | 1.70 | 0.00 | 0.00 | 0.00 | 0.60 | 1.10 |",
		"| inline1%/retrytopics1% | 1.50 | ≥ 1.0 | yes |",
		"| inline, 0% failing | 1.90 | 0.80 |", // the median repetition's CPU
		"| inline/workflow | 660 | ≥ 200 | yes |",
		"5 attempts, 20ms × 2, max 1s",
		"event 1 at 0.000, 1.013, 3.024, 7.037, 15.051 s; worst lateness 0.051 s.",
		"`" + fixedResult().SummaryLine() + "`",
		"## Intents (write path)",
		"| runtime: client.Submit → POST /v1/intents (in-process server, loopback) → ledger, one transaction per intent | 25600 | 1500 | 40.0 | 123.4 |",
		"| 25600 | 2500 | 25.0 | 60.0 |",
		"| relay: events published (Kafka-acknowledged and marked) draining the backlog, batch 500 | 51200 | 20400 | | |",
		"| runtime | 1.95 | 1.10 | 0.80 | 0.05 |", // the median repetition's CPU
		"| intents/ledger | 0.60 | ≥ 0.5 | yes |",
		"The runtime also answered: unavailable 2",
		"## Dedupe ledger: cost against history",
		"| 0 | 0 | 3 | | 385 | | 0.3 | 32000 | 31000, 32000, 33000 | 1.00 | 4.0 | 21.0 | 112 |",
		"| 50M | 50000000 | 6500 | 130.0 | 385 | 250000 | 90.0 | 30400 | 30400 | 0.95 | 4.3 | 23.0 | 115 |",
		"COPY loaded 50000000 rows in 200.0 s (250000 rows/s",
		"dropped 264 hour partitions (older than the horizon plus the 48h grace) in 0.80 s; the ledger went from 50330000 rows, 6.54 GB to 15330000 rows, 1.99 GB (bytes per row 129.9 → 129.8; 385 → 121 hour partitions)",
		"| inline, 0% failing, 10M prior events in the ledger |",
		"| inline, 0% failing, 0 prior events in the ledger | 1.85 | 0.75 | 0.90 |", // the median drain's CPU
		"| history50m/0 | 0.95 | ≥ 0.8 | yes |",
		"| ledger_bytes_per_event | 130 | stops growing once the horizon is reached (pruned at a 24h horizon: 6.54 GB → 1.99 GB, 264 partitions dropped) | yes |",
	} {
		require.Contains(t, md, want)
	}
	// Every table row has as many cells as its header.
	var cols int
	for line := range strings.SplitSeq(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(line, "|")
		if cols == 0 {
			cols = n
		}
		require.Equal(t, cols, n, "row %q", line)
	}
}

func TestMarkdownSomePhases(t *testing.T) {
	r := fixedResult()
	r.Phases = []string{"intents"}
	md := r.Markdown()
	require.Contains(t, md, "Phases run (CAUSET_BENCH_PHASES): intents.")
	require.Contains(t, md, "## Intents (write path)")
	require.Contains(t, md, "| intents/ledger | 0.60 | ≥ 0.5 | yes |")
	for _, absent := range []string{"inline mode", "Retry schedule", "Schedule accuracy", "In flight:", "| inline/raw", "bridge peak RSS", "retry topics", "## Dedupe ledger"} {
		require.NotContains(t, md, absent)
	}
	r.Phases = []string{"ceiling", "inline"}
	md = r.Markdown()
	require.Contains(t, md, "| inline mode, 1% failing |")
	require.NotContains(t, md, "## Intents")
	require.NotContains(t, md, "workflow mode")
	require.NotContains(t, md, "retry topics")
	r.Phases = []string{"inline", "retrytopics"}
	md = r.Markdown()
	require.Contains(t, md, "| retry topics: a delay topic per retry, 0% failing (0 dead-lettered after 0 delay-topic attempts) |")
	require.Contains(t, md, "| inline1%/retrytopics1% | 1.50 | ≥ 1.0 | yes |")
	require.NotContains(t, md, "| peer:")
	require.NotContains(t, md, "## Dedupe ledger")
	r.Phases = []string{"history"}
	md = r.Markdown()
	require.Contains(t, md, "## Dedupe ledger: cost against history")
	require.Contains(t, md, "| history50m/0 | 0.95 | ≥ 0.8 | yes |")
	require.NotContains(t, md, "| inline mode,")
	require.NotContains(t, md, "| inline/raw")
}

func TestSVG(t *testing.T) {
	svg := fixedResult().SVG()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var rects, texts int
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "chart.svg must be well-formed XML")
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			switch se.Name.Local {
			case "rect":
				rects++
			case "text":
				texts++
			}
		}
	}
	require.Equal(t, "svg", root)
	// background + 3 inline + 1 workflow + 2 peer + 2 retry-topics bars + 4 legend swatches.
	require.Equal(t, 1+8+4, rects)
	require.Contains(t, svg, "33k")   // inline 0% label
	require.Contains(t, svg, "820")   // peer 1% label
	require.Contains(t, svg, "16.4k") // retry topics 1% label
	require.Contains(t, svg, "60k rows/s")
	require.NotContains(t, svg, "NaN")
	require.NotContains(t, (&Result{}).SVG(), "NaN", "an empty result draws no NaN")
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, fixedResult().WriteFiles(dir))
	for _, f := range []string{"results.json", "results.md", "chart.svg", "history.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NotEmpty(t, data)
	}
	// Without the history phase there is no history chart.
	r := fixedResult()
	r.Phases = []string{"intents"}
	dir = filepath.Join(t.TempDir(), "intents")
	require.NoError(t, r.WriteFiles(dir))
	require.NoFileExists(t, filepath.Join(dir, "history.svg"))
}

func TestParseCounters(t *testing.T) {
	text := `# HELP causet_bridge_records_consumed_total Records read.
# TYPE causet_bridge_records_consumed_total counter
causet_bridge_records_consumed_total 1234
causet_bridge_applied_total{result="applied"} 1200
causet_bridge_applied_total{result="duplicate"} 4
causet_bridge_inline_failures_total{error_kind="ir_eval"} 20
causet_bridge_inline_failures_total{error_kind="sql"} 10
causet_bridge_handed_off_total{mode="inline"} 29
go_goroutines 42
`
	c, err := parseCounters(bytes.NewBufferString(text))
	require.NoError(t, err)
	require.Equal(t, counters{consumed: 1234, applied: 1200, duplicate: 4, failed: 30, handedOff: 29}, c)
}

func TestFailingAndMedian(t *testing.T) {
	count := func(pct float64, n int) int {
		k := 0
		for i := range n {
			if failing(i, pct) {
				k++
			}
		}
		return k
	}
	require.Equal(t, 0, count(0, 1000))
	require.Equal(t, 10, count(1, 1000))
	require.Equal(t, 100, count(10, 1000))
	require.Equal(t, 1000, count(100, 1000))
	recs, nf := records("t", "p", 200, 10, fixedNow)
	require.Len(t, recs, 200)
	require.Equal(t, 20, nf)
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	require.Equal(t, 0.0, median(nil))
}

var fixedNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// The unit costs come from the median 0% drain (its repetition's CPU over
// its rate), the history phase and the server's own figures, and are
// printed on the line before the summary and in results.md.
func TestUnitCosts(t *testing.T) {
	r := fixedResult()
	r.Inline[0].CPUReps[1].Postgres = 0.66
	r.Inline[1].Server = &ServerFigures{CPUMsPerStart: 2.6, PersistenceCallsPerStart: 7.4}
	r.Workflow.CPU = CPUUse{Temporal: 1}
	r.ComputeRatios()
	require.InDelta(t, 0.8/33000*1e6, r.Units.BridgeMicrosPerEvent, 1e-9)
	require.InDelta(t, 20, r.Units.PostgresMicrosPerEvent, 1e-9)
	require.InDelta(t, 11000, r.Units.EventsPerSecPerPartition, 1e-9)
	require.InDelta(t, 130, r.Units.LedgerBytesPerEvent, 1e-9)
	require.Equal(t, 2.6, r.Units.ServerCPUMsPerStart)
	require.Equal(t, 7.4, r.Units.ServerCallsPerStart)
	require.InDelta(t, 20, r.Units.ServerCPUMsPerWorkflow, 1e-9)
	require.Equal(t, "bench units: bridge_us_per_event=24.2 postgres_us_per_event=20.0 events_per_partition=11000 ledger_bytes_per_event=130 server_ms_per_start=2.60 server_calls_per_start=7.4 server_ms_per_workflow=20.0", r.UnitsLine())
	md := r.Markdown()
	require.Contains(t, md, "| bridge CPU per event, µs (inline 0 %, median repetition) | 24.2 |")
	require.Contains(t, md, "| Temporal server CPU per one-activity workflow, ms (workflow mode) | 20.0 |")

	empty := &Result{}
	empty.ComputeRatios()
	require.Equal(t, UnitCosts{}, empty.Units, "a run without the phases has no unit costs")
	require.Contains(t, empty.Markdown(), "| bridge CPU per event, µs (inline 0 %, median repetition) | — |")
}
