package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
)

// Options configure Run.
type Options struct {
	// Out is the directory results.md, results.json, chart.svg and the
	// bridge logs are written to. Required.
	Out string
	// Quick runs small sizes (under 3 minutes), to prove the command works.
	Quick bool
	// BridgeCommand returns the command that runs the bridge (configured by
	// the environment, like `causet bridge`); cpuProfile, when not empty, is
	// where the child writes its CPU profile. Required.
	BridgeCommand func(cpuProfile string) *exec.Cmd
	// CPUProfile, when set, makes every bridge child write its CPU profile to
	// CPUProfile + ".bridge-PHASE". Optional.
	CPUProfile string
	// Logger receives the stack's and the worker's logs. Optional, defaults to
	// a logger that drops everything below warnings.
	Logger *slog.Logger
	// Progress receives one line per measurement. Optional, defaults to io.Discard.
	Progress io.Writer
}

// ShortRetry is the schedule of the inline, workflow-mode, peer and
// retry-topics runs: 5 attempts a second apart (+0, 1, 2, 3, 4 s), the
// shortest delays Temporal keeps.
var ShortRetry = config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 1, Max: time.Second}

// longRetry keeps handed-off workflows retrying for the in-flight phase.
var longRetry = config.Retry{MaxAttempts: 5, Initial: 10 * time.Minute, Multiplier: 2, Max: 10 * time.Minute}

const (
	benchProjection = "bench_rows"
	benchEventType  = "BENCH_EVENT"
	benchFork       = "bench"
)

// sizesFor returns the phase sizes of a full or quick run.
func sizesFor(quick bool) Sizes {
	if quick {
		return Sizes{Ceiling: 10000, Inline: []int{10000, 10000, 3000}, FailRates: []float64{0, 1, 10}, LatencySeconds: 2,
			Workflow: 100, Peer: []int{10000, 2000}, PeerFailRates: []float64{0, 1},
			RetryTopics: []int{10000, 10000}, RetryTopicsFailRates: []float64{0, 1}, Schedule: 2, Handoff: 1000, Partitions: 3, MaxInflight: 256, Reps: 1,
			Intents: 3200, IntentClients: 64, IntentEntities: 1280, IntentConns: 64,
			History: []int{0, 1_000_000, 5_000_000}}
	}
	return Sizes{Ceiling: 100000, Inline: []int{100000, 100000, 30000}, FailRates: []float64{0, 1, 10}, LatencySeconds: 5,
		Workflow: 500, Peer: []int{100000, 20000}, PeerFailRates: []float64{0, 1},
		RetryTopics: []int{100000, 100000}, RetryTopicsFailRates: []float64{0, 1}, Schedule: 3, Handoff: 10000, Partitions: 3, MaxInflight: 256, Reps: 3,
		Intents: 25600, IntentClients: 64, IntentEntities: 6400, IntentConns: 64,
		History: []int{0, 10_000_000, 50_000_000}}
}

type bench struct {
	opts  Options
	sizes Sizes
	short config.Retry
	log   *slog.Logger
	out   io.Writer

	runID        string
	dbURL        string
	brokers      []string
	temporalAddr string
	dlqTopic     string
	idleQueue    string // no worker polls it: handed-off workflows stay open
	workQueue    string // the in-process worker's

	procs procs
	// kafkaOpts are the broker's TLS and SASL options (KafkaConnOpts).
	kafkaOpts []kgo.Opt
	svc       *app.Service // the pool, engine, Temporal client and worker
	prod      *kgo.Client
	res       *Result
}

// Run starts what it needs (devstack: PostgreSQL, the Temporal dev server
// and kfake unless DATABASE_URL, TEMPORAL_ADDRESS, KAFKA_BROKERS), measures
// every phase, writes the files to opts.Out and returns the result.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Out == "" {
		return nil, errors.New("bench: --out is required")
	}
	if opts.BridgeCommand == nil {
		return nil, errors.New("bench: Options.BridgeCommand is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	b := &bench{
		opts: opts, sizes: sizesFor(opts.Quick), short: ShortRetry, log: opts.Logger, out: opts.Progress,
		runID: strconv.FormatInt(time.Now().Unix()%1_000_000, 36),
	}
	b.dlqTopic = "bench-" + b.runID + "-dlq"
	b.idleQueue = "bench-" + b.runID + "-idle"
	b.workQueue = "bench-" + b.runID + "-work"
	phases, err := phasesFromEnv()
	if err != nil {
		return nil, err
	}
	b.res = &Result{Quick: opts.Quick, Sizes: b.sizes, Machine: machine(), Phases: phases,
		ShortSchedule: fmt.Sprintf("%d attempts, %s × %g, max %s", ShortRetry.MaxAttempts, ShortRetry.Initial, ShortRetry.Multiplier, ShortRetry.Max),
		Ordering:      ordering(),
		BridgeProcess: "the real bridge (`causet bridge`) as a child process, configured by environment; its RSS is VmRSS/VmHWM of /proc/PID/status; throughput timed from its metrics (first consumed record → every event applied or handed off, 20 ms polls)."}

	b.progress("starting PostgreSQL, Temporal dev server and Kafka (or using DATABASE_URL, TEMPORAL_ADDRESS, KAFKA_BROKERS)")
	stack, err := devstack.Start(ctx, devstack.Options{Logger: b.log.With("component", "devstack")})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			b.log.Error("stop dev stack", "error", err.Error())
		}
	}()
	b.dbURL, b.brokers = stack.DatabaseURL, stack.KafkaBrokers
	if stack.Temporal != nil {
		b.procs.temporalPIDs = []int{stack.Temporal.PID}
		b.procs.temporalMetrics = []string{stack.Temporal.MetricsURL}
	} else if b.procs, err = externalTemporalFromEnv(os.Getenv); err != nil {
		return nil, err
	}
	if stack.Postgres != nil {
		b.procs.pgDir = stack.Postgres.Dir
	}
	b.res.Machine.Kafka = "KAFKA_BROKERS " + strings.Join(b.brokers, ",")
	if stack.Kafka != nil {
		b.res.Machine.Kafka = "kfake in the bench process"
	}
	if err := b.setup(ctx, stack); err != nil {
		return nil, err
	}
	defer b.close()
	stopWorker, err := b.startWorker()
	if err != nil {
		return nil, err
	}
	defer stopWorker()

	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"ceiling", b.ceiling},
		{"schedule", b.schedule},
		{"inline", b.inlineRuns},
		{"ordering", b.orderingPhase},
		{"history", b.historyPhase},
		{"peer", b.peerRuns},
		{"retrytopics", b.retryTopicsRuns},
		{"workflow", b.workflowMode},
		{"handoff", b.handoff},
		{"intents", b.intentsPhase},
	}
	for _, s := range steps {
		if !b.res.ran(s.name) {
			continue
		}
		if err := s.f(ctx); err != nil {
			return b.res, fmt.Errorf("bench %s: %w", s.name, err)
		}
	}
	b.res.ComputeRatios()
	if b.res.ranAny(bridgePhases...) {
		b.res.Notes = append(b.res.Notes,
			b.queueNote(),
			"The peer applies each polled partition batch in one transaction with the same projection engine (as the bridge does), then retries each failed event in place on the same short schedule while its partition waits, then writes it to the DLQ topic.",
			"Events are keyed by entity; outside the ordering phase failing events have entities of their own, so entity ordering parks nothing there: the ordering phase is the case where failures share keys with successful events.",
		)
	}
	if b.res.ran("retrytopics") {
		b.res.Notes = append(b.res.Notes, b.retryTopicsNote())
	}
	if b.opts.Quick && b.res.ran("handoff") {
		b.res.Notes = append(b.res.Notes, fmt.Sprintf("Quick run: rss_10k is measured with %d failures in flight, not 10,000.", b.sizes.Handoff))
	}
	if b.res.ran("intents") {
		b.res.Notes = append(b.res.Notes, "Intents: the runtime server (package intentapi on package ledger, with its INFO line per intent written to io.Discard and its metrics) runs in the bench process on 127.0.0.1 and is driven through package client; its pool and the ceiling's are one pool. The relay (package relay, CAUSET_RELAY_BATCH and CAUSET_RELAY_POLL_INTERVAL or their defaults) publishes to a topic of the run's own; it is timed from Run to the last event of the backlog marked published (2 ms polls of its published counter).")
	}
	if err := b.res.WriteFiles(opts.Out); err != nil {
		return b.res, err
	}
	return b.res, nil
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.out, "bench: "+format+"\n", args...)
}

// handoffQueue is the task queue of the inline and hand-off runs: one no
// worker polls, so the bridge's job ends when a failure's retry workflow is
// durably started, and the retries do not compete with the measurement (nor
// with later ones). With entity ordering too: a failure that blocks its key
// is started as a plain retry workflow, and the bench's failing events have
// entities of their own, so no lane (which a worker would have to accept)
// is ever needed.
func (b *bench) handoffQueue() string { return b.idleQueue }

func (b *bench) queueNote() string {
	return fmt.Sprintf("Inline and hand-off runs use task queue %q, which no worker polls: the bridge's job ends when a failure's retry workflow is durably started, and its retries do not compete with the measurement. (With CAUSET_ORDERING=entity a failure that blocks its key is started the same way; in these runs no later event of its key arrives, so nothing is parked.) Workflow mode and the schedule run use the in-process worker (default worker options from package worker).", b.idleQueue)
}

// phaseNames are the phases of a run, in the order they run.
var phaseNames = []string{"ceiling", "schedule", "inline", "ordering", "history", "peer", "retrytopics", "workflow", "handoff", "intents"}

// phasesFromEnv reads CAUSET_BENCH_PHASES, a comma-separated subset of
// phaseNames to run (e.g. "intents"); unset or empty runs every phase (nil).
func phasesFromEnv() ([]string, error) {
	v := strings.TrimSpace(os.Getenv("CAUSET_BENCH_PHASES"))
	if v == "" {
		return nil, nil
	}
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(phaseNames, p) {
			return nil, fmt.Errorf("CAUSET_BENCH_PHASES=%q: unknown phase %q (want a comma-separated subset of %s)", v, p, strings.Join(phaseNames, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return slices.Index(phaseNames, a) - slices.Index(phaseNames, b) })
	return out, nil
}

// ordering is the bridge children's CAUSET_ORDERING (inherited from the
// environment; the bridge's default is entity).
func ordering() string {
	if v := os.Getenv("CAUSET_ORDERING"); v != "" {
		return v
	}
	return string(config.OrderingEntity)
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemoryGiB = kb / (1 << 20)
			}
		}
	}
	return m
}
