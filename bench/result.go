package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Result is everything one run measured. It is written to results.json as
// is; results.md, chart.svg and the summary line are derived from it.
type Result struct {
	// Quick is true for a --quick run (smaller sizes, see Sizes).
	Quick   bool    `json:"quick"`
	Machine Machine `json:"machine"`
	Sizes   Sizes   `json:"sizes"`
	// ShortSchedule is the retry schedule of the inline, peer and
	// retry-topics runs (e.g. "5 attempts, 20ms x 2, max 1s").
	ShortSchedule string `json:"shortSchedule"`
	// BridgeProcess says how the bridge ran and how its RSS was read.
	BridgeProcess string `json:"bridgeProcess"`
	// Ordering is the bridge's CAUSET_ORDERING (entity or none).
	Ordering string `json:"ordering"`
	// Phases are the phases run, when CAUSET_BENCH_PHASES chose some; empty
	// when every phase ran.
	Phases []string `json:"phases,omitempty"`

	// Ceiling is the pgx batched upsert of the same rows, no Kafka, no dedupe.
	Ceiling Ceiling `json:"ceiling"`
	// Inline holds the end-to-end inline-mode runs by failure rate.
	Inline []InlineRun `json:"inline"`
	// Workflow is workflow mode (every event a workflow).
	Workflow WorkflowRun `json:"workflow"`
	// Peer holds the in-place-retry consumer runs by failure rate.
	Peer []PeerRun `json:"peer"`
	// RetryTopics holds the retry-topics consumer runs by failure rate.
	RetryTopics []RetryTopicsRun `json:"retryTopics"`
	// Schedule is the default schedule's accuracy on the Temporal dev server.
	Schedule ScheduleRun `json:"schedule"`
	// Handoff is the hand-off capacity at 100% failing events.
	Handoff HandoffRun `json:"handoff"`
	// InFlight is the bridge's memory with many failures handed off.
	InFlight InFlightRun `json:"inFlight"`
	// Intents is the write path: the runtime against the same ledger rows
	// written directly, and the relay.
	Intents IntentsRun `json:"intents"`
	// History is inline mode against the dedupe ledger's history.
	History HistoryRun `json:"history"`
	// Ordering is entity ordering against none with failures on shared
	// keys, and releases after a head settles.
	OrderingPhase OrderingRun `json:"orderingPhase"`

	Ratios Ratios `json:"ratios"`
	// Units are the unit costs docs/CAPACITY.md sizes a deployment from.
	Units UnitCosts `json:"units"`
	// Notes are free-form remarks printed under the table.
	Notes []string `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memoryGiB"`
	GoVersion string  `json:"goVersion"`
	OS        string  `json:"os"`
	Kafka     string  `json:"kafka"`
	Postgres  string  `json:"postgres"`
	Temporal  string  `json:"temporal"`
}

// Sizes are the event counts of each phase.
type Sizes struct {
	Ceiling        int       `json:"ceiling"`
	Inline         []int     `json:"inline"` // per failure rate, same order as FailRates
	FailRates      []float64 `json:"failRates"`
	LatencySeconds float64   `json:"latencySeconds"`
	Workflow       int       `json:"workflow"`
	Peer           []int     `json:"peer"`
	PeerFailRates  []float64 `json:"peerFailRates"`
	Schedule       int       `json:"schedule"`
	Handoff        int       `json:"handoff"`
	Partitions     int       `json:"partitions"`
	MaxInflight    int       `json:"maxInflight"`
	// Reps is how many times the 0% and 1% inline drains, the 0% peer
	// drain, every retry-topics run (fresh topics and bridge or consumers
	// each) and the intents phase's measurements are repeated; the median
	// is reported.
	Reps int `json:"reps"`
	// Intents is how many intents each intents-phase measurement submits
	// (the runtime's, and the ceiling's the same rows written directly),
	// from IntentClients concurrent clients over IntentEntities entities, on
	// a pool of IntentConns connections.
	Intents        int `json:"intents"`
	IntentClients  int `json:"intentClients"`
	IntentEntities int `json:"intentEntities"`
	IntentConns    int `json:"intentConns"`

	// RetryTopics are the retry-topics runs' sizes, per RetryTopicsFailRates:
	// the inline runs' at the same rates, since nothing waits in place.
	RetryTopics          []int     `json:"retryTopics"`
	RetryTopicsFailRates []float64 `json:"retryTopicsFailRates"`

	// History are the dedupe ledger's sizes (prior applied events) the
	// history phase runs inline 0% at (Inline[0] events), cumulatively.
	History []int `json:"history"`
}

// Ceiling is the raw PostgreSQL write rate.
type Ceiling struct {
	Rows int `json:"rows"`
	// RowsPerSec is the best of the single-connection and the
	// one-connection-per-partition runs.
	RowsPerSec float64 `json:"rowsPerSec"`
	// RowsPerSecOneConn is one connection, batches of 500 per transaction.
	RowsPerSecOneConn float64 `json:"rowsPerSecOneConn"`
	// RowsPerSecParallel is one connection per partition.
	RowsPerSecParallel float64 `json:"rowsPerSecParallel"`
	// WithLedgerPerSec is one connection per partition writing, per event,
	// a dedupe-ledger row as well (what at-most-once effects cost the
	// database); not the ceiling, a diagnostic.
	WithLedgerPerSec float64 `json:"withLedgerPerSec"`
}

// InlineRun is one inline-mode run.
type InlineRun struct {
	FailPct      float64 `json:"failPct"`
	Events       int     `json:"events"`
	Failing      int     `json:"failing"`
	EventsPerSec float64 `json:"eventsPerSec"`
	// EventsPerSecReps are the repetitions EventsPerSec is the median of.
	EventsPerSecReps []float64 `json:"eventsPerSecReps"`
	// CPUReps is where the CPU went during each repetition.
	CPUReps []CPUUse `json:"cpuReps"`
	// StartsPerSec is failing events handed off per second of the drain.
	StartsPerSec float64 `json:"startsPerSec,omitempty"`
	// Latency is measured in a second, paced phase against the same bridge
	// (LatencyRate events/s, half the drained rate) so it is not queueing
	// behind a pre-produced backlog.
	LatencyRate    float64 `json:"latencyRate"`
	LatencySamples int     `json:"latencySamples"`
	P50Ms          float64 `json:"p50Ms"`
	P99Ms          float64 `json:"p99Ms"`
	PeakRSSMB      float64 `json:"peakRSSMB"`
	// Server is the Temporal server's own figures for the last
	// repetition's drain, when events failed (nil otherwise).
	Server *ServerFigures `json:"server,omitempty"`
}

// WorkflowRun is the workflow-mode run.
type WorkflowRun struct {
	Events       int     `json:"events"`
	EventsPerSec float64 `json:"eventsPerSec"`
	PeakRSSMB    float64 `json:"peakRSSMB"`
	CPU          CPUUse  `json:"cpu"`
}

// PeerRun is one run of the in-place-retry consumer.
type PeerRun struct {
	FailPct          float64   `json:"failPct"`
	Events           int       `json:"events"`
	Failing          int       `json:"failing"`
	DeadLettered     int       `json:"deadLettered"`
	EventsPerSec     float64   `json:"eventsPerSec"`
	EventsPerSecReps []float64 `json:"eventsPerSecReps"`
	CPUReps          []CPUUse  `json:"cpuReps"`
}

// RetryTopicsRun is one run of the retry-topics consumers.
type RetryTopicsRun struct {
	FailPct      float64 `json:"failPct"`
	Events       int     `json:"events"`
	Failing      int     `json:"failing"`
	DeadLettered int     `json:"deadLettered"`
	// Retried is the records consumed from the delay topics (attempts 2..N).
	Retried int `json:"retried"`
	// EventsPerSec is events over first fetched record → last event applied
	// or dead-lettered (median of EventsPerSecReps).
	EventsPerSec     float64   `json:"eventsPerSec"`
	EventsPerSecReps []float64 `json:"eventsPerSecReps"`
	// DrainEventsPerSec is events over first fetched record → the events
	// topic's last record applied or forwarded to a delay topic; a
	// diagnostic (median of DrainEventsPerSecReps).
	DrainEventsPerSec     float64   `json:"drainEventsPerSec"`
	DrainEventsPerSecReps []float64 `json:"drainEventsPerSecReps"`
	CPUReps               []CPUUse  `json:"cpuReps"`
	// LatenessMaxS is the worst start of a delay-topic attempt behind its
	// due time, over the repetitions.
	LatenessMaxS float64 `json:"latenessMaxS"`
}

// ScheduleRun compares attempt start offsets with the schedule.
type ScheduleRun struct {
	Events int `json:"events"`
	// ExpectedS are the schedule's offsets from attempt 1, in seconds.
	ExpectedS []float64 `json:"expectedS"`
	// ObservedS holds, per event, each attempt's start offset from attempt 1.
	ObservedS [][]float64 `json:"observedS"`
	// LatenessMaxS is the worst observed-minus-expected offset.
	LatenessMaxS float64 `json:"latenessMaxS"`
	// DeadLetter is what the first event's retry workflow cost Temporal
	// once it was dead-lettered (empty when not read).
	DeadLetter HistoryCost `json:"deadLetter"`
}

// HandoffRun compares the bridge's workflow starts with raw ExecuteWorkflow calls.
type HandoffRun struct {
	Events             int     `json:"events"`
	Concurrency        int     `json:"concurrency"`
	BridgeStartsPerSec float64 `json:"bridgeStartsPerSec"`
	RawStartsPerSec    float64 `json:"rawStartsPerSec"`
	// RawBeforePerSec and RawAfterPerSec are the two halves of the raw calls,
	// made before and after the bridge's run.
	RawBeforePerSec float64 `json:"rawBeforePerSec"`
	RawAfterPerSec  float64 `json:"rawAfterPerSec"`
	BridgeCPU       CPUUse  `json:"bridgeCPU"`
	RawCPU          CPUUse  `json:"rawCPU"`
	// PolledPerSec and EagerPerSec are raw starts on a queue the bench's
	// worker polls, without and with EnableEagerStart.
	PolledPerSec float64 `json:"polledPerSec"`
	EagerPerSec  float64 `json:"eagerPerSec"`
	PolledCPU    CPUUse  `json:"polledCPU"`
	EagerCPU     CPUUse  `json:"eagerCPU"`
	// BridgeServer, RawServer, PolledServer and EagerServer are the
	// Temporal server's own figures for the bridge's run, the first half of
	// the raw calls and the polled-queue runs (nil when the server is not
	// the bench's own).
	BridgeServer *ServerFigures `json:"bridgeServer,omitempty"`
	RawServer    *ServerFigures `json:"rawServer,omitempty"`
	PolledServer *ServerFigures `json:"polledServer,omitempty"`
	EagerServer  *ServerFigures `json:"eagerServer,omitempty"`
}

// InFlightRun is the bridge's memory with Failures handed off and retrying.
type InFlightRun struct {
	Failures  int     `json:"failures"`
	RSSMB     float64 `json:"rssMB"`
	PeakRSSMB float64 `json:"peakRSSMB"`
}

// IntentsRun is the write path: intents through the runtime server (HTTP,
// the ledger's one transaction each) against the same rows written directly
// with pgx at the same concurrency, and the outbox relay draining the
// backlog they left.
type IntentsRun struct {
	// Intents is the number submitted by each measurement.
	Intents   int    `json:"intents"`
	Clients   int    `json:"clients"`
	Entities  int    `json:"entities"`
	PoolConns int    `json:"poolConns"`
	Mix       string `json:"mix"`
	// IntentsPerSec is client.Submit calls answered SUCCESS per second
	// (median of IntentsPerSecReps); P50Ms and P99Ms are the latency of one
	// Submit, median over the repetitions.
	IntentsPerSec     float64   `json:"intentsPerSec"`
	IntentsPerSecReps []float64 `json:"intentsPerSecReps"`
	P50Ms             float64   `json:"p50Ms"`
	P99Ms             float64   `json:"p99Ms"`
	P50MsReps         []float64 `json:"p50MsReps"`
	P99MsReps         []float64 `json:"p99MsReps"`
	CPUReps           []CPUUse  `json:"cpuReps"`
	// LedgerPerSec is the ceiling: the same rows written directly with
	// pgx by the ledger's record statement (sequence upsert, event row,
	// intent row), one transaction (pgx.BeginFunc) per intent, same clients
	// and pool.
	LedgerPerSec     float64   `json:"ledgerPerSec"`
	LedgerPerSecReps []float64 `json:"ledgerPerSecReps"`
	LedgerP50Ms      float64   `json:"ledgerP50Ms"`
	LedgerP99Ms      float64   `json:"ledgerP99Ms"`
	LedgerCPUReps    []CPUUse  `json:"ledgerCPUReps"`
	// PipelinedPerSec is the ceiling sent as one round trip (BEGIN, the
	// statement and COMMIT in one pgx batch): the least these rows cost.
	PipelinedPerSec     float64   `json:"pipelinedPerSec"`
	PipelinedPerSecReps []float64 `json:"pipelinedPerSecReps"`
	PipelinedP50Ms      float64   `json:"pipelinedP50Ms"`
	PipelinedP99Ms      float64   `json:"pipelinedP99Ms"`
	PipelinedCPUReps    []CPUUse  `json:"pipelinedCPUReps"`
	// StepwisePerSec is a diagnostic between the runtime and the ceiling:
	// the ledger's statements (BEGIN, intent lock, lookup, FollowArtist's
	// read, the record statement, COMMIT) issued directly, one round trip
	// each, with no HTTP and no handler.
	StepwisePerSec     float64   `json:"stepwisePerSec"`
	StepwisePerSecReps []float64 `json:"stepwisePerSecReps"`
	StepwiseP50Ms      float64   `json:"stepwiseP50Ms"`
	StepwiseP99Ms      float64   `json:"stepwiseP99Ms"`
	StepwiseCPUReps    []CPUUse  `json:"stepwiseCPUReps"`
	// RelayEventsPerSec is events published (acknowledged by Kafka and
	// marked) per second by the relay draining the backlog of RelayEvents.
	RelayEvents           int       `json:"relayEvents"`
	RelayBatch            int       `json:"relayBatch"`
	RelayEventsPerSec     float64   `json:"relayEventsPerSec"`
	RelayEventsPerSecReps []float64 `json:"relayEventsPerSecReps"`
	RelayCPUReps          []CPUUse  `json:"relayCPUReps"`
	// NotSuccess counts the runtime's answers other than success, by
	// status (none expected).
	NotSuccess map[string]float64 `json:"notSuccess,omitempty"`
}

// Ratios are the figures of the summary line.
type Ratios struct {
	InlineRaw      float64 `json:"inlineRaw"`
	Inline1Raw     float64 `json:"inline1Raw"`
	InlineWorkflow float64 `json:"inlineWorkflow"`
	Inline1Peer1   float64 `json:"inline1Peer1"`
	HandoffRaw     float64 `json:"handoffRaw"`
	LatenessMaxS   float64 `json:"latenessMaxS"`
	RSS10kMB       float64 `json:"rss10kMB"`
	IntentsLedger  float64 `json:"intentsLedger"`
	IntentsP99Ms   float64 `json:"intentsP99Ms"`
	RelayEPS       float64 `json:"relayEPS"`

	// Inline1RetryTopics1 is inline 1% over retry topics 1%, both timed to
	// the events topic drained (every failure durably handed on: a started
	// workflow, an acknowledged delay-topic record).
	Inline1RetryTopics1 float64 `json:"inline1RetryTopics1"`

	// History50m0 is inline 0% with the largest history (50M prior events;
	// 5M in a quick run) over inline 0% with none; LedgerBytesPerEvent is
	// the ledger's bytes per row at the first size with history (10M; 1M).
	History50m0         float64 `json:"history50m0"`
	LedgerBytesPerEvent float64 `json:"ledgerBytesPerEvent"`

	// OrderingClean is the rate of the events of keys that never fail under
	// entity ordering over the same under none (1 % failing on shared keys).
	// OrderingLateS is the time to apply every successful event under entity
	// ordering less the schedule's length, OrderingLateBoundS its bound: twice
	// none's drain time plus 5 s. HotDrainS is how long the events parked
	// behind one head took once it settled; ReleaseEPS the release rate
	// across keys.
	OrderingClean      float64 `json:"orderingClean"`
	OrderingLateS      float64 `json:"orderingLateS"`
	OrderingLateBoundS float64 `json:"orderingLateBoundS"`
	HotDrainS          float64 `json:"hotDrainS"`
	ReleaseEPS         float64 `json:"releaseEPS"`
}

// Target is one goal of issue 7.
type Target struct {
	Name  string
	Value float64
	Goal  string
	Met   bool
}

func ratio(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// inline is the inline run at failure rate pct (zero when there is none).
func (r *Result) inline(pct float64) InlineRun {
	return runAt(r.Inline, pct, func(x InlineRun) float64 { return x.FailPct })
}

// peer is the peer run at failure rate pct (zero when there is none).
func (r *Result) peer(pct float64) PeerRun {
	return runAt(r.Peer, pct, func(x PeerRun) float64 { return x.FailPct })
}

// retryTopics is the retry-topics run at failure rate pct (zero when there is none).
func (r *Result) retryTopics(pct float64) RetryTopicsRun {
	return runAt(r.RetryTopics, pct, func(x RetryTopicsRun) float64 { return x.FailPct })
}

// runAt returns the first of runs whose failure rate is pct, or the zero run.
func runAt[R any](runs []R, pct float64, failPct func(R) float64) R {
	for _, x := range runs {
		if failPct(x) == pct {
			return x
		}
	}
	var zero R
	return zero
}

// ComputeRatios fills r.Ratios and r.Units from the measurements.
func (r *Result) ComputeRatios() {
	r.Units = r.unitCosts()
	r.Ratios = Ratios{
		InlineRaw:      ratio(r.inline(0).EventsPerSec, r.Ceiling.RowsPerSec),
		Inline1Raw:     ratio(r.inline(1).EventsPerSec, r.Ceiling.RowsPerSec),
		InlineWorkflow: ratio(r.inline(0).EventsPerSec, r.Workflow.EventsPerSec),
		Inline1Peer1:   ratio(r.inline(1).EventsPerSec, r.peer(1).EventsPerSec),
		HandoffRaw:     ratio(r.Handoff.BridgeStartsPerSec, r.Handoff.RawStartsPerSec),
		LatenessMaxS:   r.Schedule.LatenessMaxS,
		RSS10kMB:       r.InFlight.RSSMB,
		IntentsLedger:  r.Intents.ratio(),
		IntentsP99Ms:   r.Intents.P99Ms,
		RelayEPS:       r.Intents.RelayEventsPerSec,

		Inline1RetryTopics1: ratio(r.inline(1).EventsPerSec, r.retryTopics(1).DrainEventsPerSec),

		History50m0:         r.History.ratio(),
		LedgerBytesPerEvent: r.History.bytesPerEvent(),

		OrderingClean:      ratio(r.OrderingPhase.EntityCleanEP, r.OrderingPhase.NoneCleanEP),
		OrderingLateS:      max(r.OrderingPhase.EntityAllS-r.OrderingPhase.ScheduleS, 0),
		OrderingLateBoundS: 2*r.OrderingPhase.NoneDrainS + 5,
		HotDrainS:          r.OrderingPhase.HotDrainS,
		ReleaseEPS:         r.OrderingPhase.WideEPS,
	}
}

// ratio is intents/ledger: the median over the repetitions of the runtime's
// rate over the ceiling's in the same repetition (measured back to back, so
// a change of load between repetitions cancels out), or the ratio of the
// medians when the repetitions do not pair up.
func (x IntentsRun) ratio() float64 {
	if len(x.IntentsPerSecReps) == 0 || len(x.IntentsPerSecReps) != len(x.LedgerPerSecReps) {
		return ratio(x.IntentsPerSec, x.LedgerPerSec)
	}
	rs := make([]float64, len(x.IntentsPerSecReps))
	for i := range rs {
		rs[i] = ratio(x.IntentsPerSecReps[i], x.LedgerPerSecReps[i])
	}
	return median(rs)
}

// ran reports whether phase was run.
func (r *Result) ran(phase string) bool {
	return len(r.Phases) == 0 || slices.Contains(r.Phases, phase)
}

// Targets are the goals (issue 7's, and the write path's intents/ledger)
// of the phases run against this result.
func (r *Result) Targets() []Target {
	q := r.Ratios
	all := []struct {
		phases []string // every one must have run
		t      Target
	}{
		{[]string{"inline", "ceiling"}, Target{"inline/raw", q.InlineRaw, "≥ 0.5", q.InlineRaw >= 0.5}},
		{[]string{"inline", "ceiling"}, Target{"inline1%/raw", q.Inline1Raw, "≥ 0.4", q.Inline1Raw >= 0.4}},
		{[]string{"inline", "workflow"}, Target{"inline/workflow", q.InlineWorkflow, "≥ 200", q.InlineWorkflow >= 200}},
		{[]string{"inline", "peer"}, Target{"inline1%/peer1%", q.Inline1Peer1, "≥ 5", q.Inline1Peer1 >= 5}},
		{[]string{"inline", "retrytopics"}, Target{"inline1%/retrytopics1%", q.Inline1RetryTopics1, "≥ 1.0", q.Inline1RetryTopics1 >= 1}},
		{[]string{"handoff"}, Target{"handoff/raw", q.HandoffRaw, "≥ 0.8", q.HandoffRaw >= 0.8}},
		{[]string{"schedule"}, Target{"lateness_max (s)", q.LatenessMaxS, "≤ 0.25", q.LatenessMaxS <= 0.25}},
		{[]string{"handoff"}, Target{fmt.Sprintf("RSS at %d in flight (MB)", r.InFlight.Failures), q.RSS10kMB, "≤ 150", q.RSS10kMB <= 150}},
		{[]string{"intents"}, Target{"intents/ledger", q.IntentsLedger, "≥ 0.5", q.IntentsLedger >= 0.5}},
		{[]string{"history"}, Target{"history50m/0", q.History50m0, "≥ 0.8", q.History50m0 >= 0.8}},
		{[]string{"history"}, Target{"ledger_bytes_per_event", q.LedgerBytesPerEvent, r.History.Prune.goal(), r.History.Prune.bounded()}},
		{[]string{"ordering"}, Target{"ordering clean keys: entity/none", q.OrderingClean, "≥ 0.8", q.OrderingClean >= 0.8}},
		{[]string{"ordering"}, Target{"ordering: every success less the schedule (s)", q.OrderingLateS,
			fmt.Sprintf("≤ 2 × none + 5 s = %.1f", q.OrderingLateBoundS), q.OrderingLateS <= q.OrderingLateBoundS}},
		{[]string{"ordering"}, Target{fmt.Sprintf("%d parked behind one head: drained after it settled (s)", r.OrderingPhase.HotParked), q.HotDrainS, "≤ 5", q.HotDrainS <= 5}},
		{[]string{"ordering"}, Target{"release across keys (events/s)", q.ReleaseEPS, "≥ 10000", q.ReleaseEPS >= 10000}},
	}
	var out []Target
	for _, x := range all {
		ok := true
		for _, p := range x.phases {
			ok = ok && r.ran(p)
		}
		if ok {
			out = append(out, x.t)
		}
	}
	return out
}

// SummaryLine is the last line of stdout.
func (r *Result) SummaryLine() string {
	q := r.Ratios
	return fmt.Sprintf("bench: inline/raw=%.2f inline1%%/raw=%.2f inline/workflow=%.1f inline1%%/peer1%%=%.1f handoff/raw=%.2f lateness_max=%.2fs rss_10k=%dMB intents/ledger=%.2f intents_p99=%.1fms relay_eps=%d inline1%%/retrytopics1%%=%.2f history50m/0=%.2f ledger_bytes_per_event=%d ordering_clean/none=%.2f ordering_late=%.1fs/%.1fs hot_drain=%.2fs release_eps=%d",
		q.InlineRaw, q.Inline1Raw, q.InlineWorkflow, q.Inline1Peer1, q.HandoffRaw, q.LatenessMaxS, int(math.Round(q.RSS10kMB)),
		q.IntentsLedger, q.IntentsP99Ms, int(math.Round(q.RelayEPS)), q.Inline1RetryTopics1, q.History50m0, int(math.Round(q.LedgerBytesPerEvent)),
		q.OrderingClean, q.OrderingLateS, q.OrderingLateBoundS, q.HotDrainS, int(math.Round(q.ReleaseEPS)))
}

// JSON is results.json.
func (r *Result) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ReadResult reads the results.json a run wrote to dir.
func ReadResult(dir string) (*Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return &r, nil
}

// WriteFiles writes results.json, results.md and chart.svg to dir, and
// history.svg when the history phase ran.
func (r *Result) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := r.JSON()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"results.json": j,
		"results.md":   []byte(r.Markdown()),
		"chart.svg":    []byte(r.SVG()),
	}
	if r.ran("history") && len(r.History.Steps) > 0 {
		files["history.svg"] = []byte(r.HistorySVG())
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
