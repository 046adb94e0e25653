// Package bench is `causet bench`: one run that measures the PostgreSQL
// ceiling, the bridge end to end in inline mode at 0%, 1% and 10% failing
// events, workflow mode, the seed's in-place-retry design (the peer), the
// default schedule's accuracy on Temporal, the hand-off capacity against raw
// ExecuteWorkflow calls and the bridge's memory with many failures in
// flight, and writes results.md, results.json and chart.svg.
//
// The bridge under test is the real one, run as a child process (`causet
// bridge`, via Options.BridgeCommand) so its resident set is its own: the
// bench process also holds the in-process Kafka (kfake) with every record,
// the Temporal worker, the peer and the producers. Throughput is timed from
// the first poll of the bridge's metrics that shows a consumed record to the
// first that shows every event applied or handed off (20 ms polls), so
// process start, Temporal dial and the consumer group join are not counted.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
	"github.com/causet/projection-retry/worker"
	"github.com/causet/projection-retry/workflows"
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

// ShortRetry is the schedule of the inline, workflow-mode and peer runs:
// 5 attempts a second apart (+0, 1, 2, 3, 4 s), the shortest delays
// Temporal keeps.
var ShortRetry = config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 1, Max: time.Second}

// longRetry keeps handed-off workflows retrying for the in-flight phase.
var longRetry = config.Retry{MaxAttempts: 5, Initial: 10 * time.Minute, Multiplier: 2, Max: 10 * time.Minute}

const (
	benchProjection = "bench_rows"
	benchEventType  = "BENCH_EVENT"
	benchFork       = "bench"
)

// benchIR is the projection under test: one upsert per event. v divides by
// payload.d, so d = 0 fails with the seed's IR evaluation error.
const benchIR = `name: bench_rows
version: 1
source_events: [BENCH_EVENT]
table: bench_rows
key: [event_id]
on:
  BENCH_EVENT:
    op: upsert
    columns:
      event_id: event.eventId
      entity_id: event.entityId
      produced_at: event.occurredAt
      v: event.payload.n / event.payload.d
`

// benchDDL: applied_at is when the row was written (clock_timestamp, not the
// transaction start), so applied_at - produced_at is produce → applied
// minus at most the rest of the batch's transaction. event_id is COLLATE "C"
// so a phase's rows are found by an index range scan on its prefix.
const benchDDL = `
CREATE TABLE IF NOT EXISTS bench_rows (
    event_id    text COLLATE "C" PRIMARY KEY,
    entity_id   text NOT NULL,
    produced_at timestamptz NOT NULL,
    v           bigint,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS bench_ceiling (
    event_id    text COLLATE "C" PRIMARY KEY,
    entity_id   text NOT NULL,
    produced_at timestamptz NOT NULL,
    v           bigint,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS bench_ledger (
    projection text NOT NULL,
    fork_id    text NOT NULL,
    event_id   text COLLATE "C" NOT NULL,
    PRIMARY KEY (projection, fork_id, event_id)
);
TRUNCATE bench_rows, bench_ceiling, bench_ledger;`

const ceilingUpsert = `INSERT INTO bench_ceiling (event_id, entity_id, produced_at, v) VALUES ($1, $2, $3, $4)
ON CONFLICT (event_id) DO UPDATE SET entity_id = excluded.entity_id, produced_at = excluded.produced_at, v = excluded.v`

const ledgerInsert = `INSERT INTO bench_ledger (projection, fork_id, event_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// sizesFor returns the phase sizes of a full or quick run.
func sizesFor(quick bool) Sizes {
	if quick {
		return Sizes{Ceiling: 10000, Inline: []int{10000, 10000, 3000}, FailRates: []float64{0, 1, 10}, LatencySeconds: 2,
			Workflow: 100, Peer: []int{10000, 2000}, PeerFailRates: []float64{0, 1}, Schedule: 2, Handoff: 1000, Partitions: 3, MaxInflight: 256, Reps: 1}
	}
	return Sizes{Ceiling: 100000, Inline: []int{100000, 100000, 30000}, FailRates: []float64{0, 1, 10}, LatencySeconds: 5,
		Workflow: 500, Peer: []int{100000, 20000}, PeerFailRates: []float64{0, 1}, Schedule: 3, Handoff: 10000, Partitions: 3, MaxInflight: 256, Reps: 3}
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

	procs  procs
	pool   *pgxpool.Pool
	engine *projection.Engine
	tc     client.Client
	prod   *kgo.Client
	res    *Result
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
	b.res = &Result{Quick: opts.Quick, Sizes: b.sizes, Machine: machine(),
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
		b.procs.temporalPID = stack.Temporal.PID
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
		{"peer", b.peerRuns},
		{"workflow", b.workflowMode},
		{"handoff", b.handoff},
	}
	for _, s := range steps {
		if err := s.f(ctx); err != nil {
			return b.res, fmt.Errorf("bench %s: %w", s.name, err)
		}
	}
	b.res.ComputeRatios()
	b.res.Notes = append(b.res.Notes,
		b.queueNote(),
		"The peer applies each polled partition batch in one transaction with the same projection engine (as the bridge does), then retries each failed event in place on the same short schedule while its partition waits, then writes it to the DLQ topic.",
		"Events are keyed by entity; failing events have entities of their own, so entity ordering never holds successful events back.",
	)
	if b.opts.Quick {
		b.res.Notes = append(b.res.Notes, fmt.Sprintf("Quick run: rss_10k is measured with %d failures in flight, not 10,000.", b.sizes.Handoff))
	}
	if err := b.res.WriteFiles(opts.Out); err != nil {
		return b.res, err
	}
	return b.res, nil
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.out, "bench: "+format+"\n", args...)
}

func (b *bench) setup(ctx context.Context, stack *devstack.Stack) error {
	pool, err := pgxpool.New(ctx, b.dbURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	b.pool = pool
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&b.res.Machine.Postgres); err != nil {
		return err
	}
	if err := projection.EnsureSchema(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, benchDDL); err != nil {
		return fmt.Errorf("bench tables: %w", err)
	}
	doc, err := projection.Parse([]byte(benchIR))
	if err != nil {
		return err
	}
	if _, err := projection.Deploy(ctx, pool, doc); err != nil {
		return err
	}
	if b.engine, err = projection.NewEngine(ctx, pool, b.log); err != nil {
		return err
	}

	copts := client.Options{Namespace: client.DefaultNamespace, Logger: worker.SDKLogger(b.log)}
	if stack.Temporal != nil {
		copts.HostPort = stack.Temporal.HostPort
		b.temporalAddr = stack.Temporal.HostPort
		b.res.Machine.Temporal = "dev server (in memory), " + stack.Temporal.CLI
	} else {
		eo, err := envconfig.LoadDefaultClientOptions()
		if err != nil {
			return fmt.Errorf("temporal client configuration: %w", err)
		}
		eo.Logger = copts.Logger
		if eo.Namespace == "" {
			eo.Namespace = client.DefaultNamespace
		}
		copts = eo
		b.res.Machine.Temporal = "TEMPORAL_ADDRESS " + eo.HostPort
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	b.tc, err = client.DialContext(dctx, copts)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to Temporal: %w", err)
	}
	if b.prod, err = kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20), kgo.AllowAutoTopicCreation()); err != nil {
		return err
	}
	return devstack.EnsureTopics(ctx, b.brokers, int32(b.sizes.Partitions), b.dlqTopic)
}

func (b *bench) close() {
	if b.prod != nil {
		b.prod.Close()
	}
	if b.tc != nil {
		b.tc.Close()
	}
	if b.engine != nil {
		b.engine.Close()
	}
	if b.pool != nil {
		b.pool.Close()
	}
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
	return fmt.Sprintf("Inline and hand-off runs use task queue %q, which no worker polls: the bridge's job ends when a failure's retry workflow is durably started, and its retries do not compete with the measurement. (With CAUSET_ORDERING=entity a failure that blocks its key is started the same way; the bench's failing events have entities of their own, so no lane is needed.) Workflow mode and the schedule run use the in-process worker (default worker options from package worker).", b.idleQueue)
}

// startWorker runs a worker on workQueue until the returned stop is called.
func (b *bench) startWorker() (func(), error) {
	dcl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Options{
		Client:    b.tc,
		TaskQueue: b.workQueue,
		Activities: &activities.Activities{
			Applier:   b.engine,
			Publisher: &dlq.Publisher{Client: dcl, Topic: b.dlqTopic},
			Logger:    b.log,
			Metrics:   activities.NewMetrics(prometheus.NewRegistry()),
		},
	})
	if err != nil {
		dcl.Close()
		return nil, err
	}
	if err := w.Start(); err != nil {
		dcl.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { w.Stop(); dcl.Close() }) }, nil
}

// ---- events ----

// envelope builds one bench event; failing ones divide by zero.
func envelope(id, entity string, seq int, fail bool, at time.Time) event.Envelope {
	d := 1
	if fail {
		d = 0
	}
	return event.Envelope{
		EventID: id, EventType: benchEventType, EntityID: entity, ForkID: benchFork,
		IntentID: "bench", Sequence: int64(seq), OccurredAt: at,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"d":%d}`, seq+1, d)),
	}
}

// failing reports whether event i of a run at failPct fails: every
// 100/failPct-th event, spread evenly.
func failing(i int, failPct float64) bool {
	if failPct <= 0 {
		return false
	}
	every := int(100/failPct + 0.5)
	return i%every == every-1
}

// records returns n records of phase prefix for topic; failing events have
// entities of their own.
func records(topic, prefix string, n int, failPct float64, at time.Time) ([]*kgo.Record, int) {
	recs := make([]*kgo.Record, 0, n)
	nf := 0
	for i := range n {
		id := fmt.Sprintf("%s-%07d", prefix, i)
		entity := fmt.Sprintf("e-%s-%d", prefix, i%1000)
		f := failing(i, failPct)
		if f {
			entity = "fail-" + id
			nf++
		}
		v, _ := json.Marshal(envelope(id, entity, i, f, at))
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(entity), Value: v})
	}
	return recs, nf
}

func (b *bench) topic(ctx context.Context, phase string) (string, error) {
	t := "bench-" + b.runID + "-" + phase
	return t, devstack.EnsureTopics(ctx, b.brokers, int32(b.sizes.Partitions), t)
}

func (b *bench) produce(ctx context.Context, recs []*kgo.Record) error {
	for i := 0; i < len(recs); i += 5000 {
		if err := b.prod.ProduceSync(ctx, recs[i:min(i+5000, len(recs))]...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// rowsWithPrefix counts the applied rows of a phase.
func (b *bench) rowsWithPrefix(ctx context.Context, prefix string) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bench_rows WHERE event_id >= $1 AND event_id < $2`, prefix+"-", prefix+".").Scan(&n)
	return n, err
}

// ---- 1. ceiling ----

func (b *bench) ceiling(ctx context.Context) error {
	n := b.sizes.Ceiling
	at := time.Now()
	run := func(conns int, prefix string, ledger bool) (float64, error) {
		start := time.Now()
		per := n / conns
		errc := make(chan error, conns)
		for c := range conns {
			go func() {
				for i := 0; i < per; i += 500 {
					batch := &pgx.Batch{}
					for j := i; j < min(i+500, per); j++ {
						k := c*per + j
						id := fmt.Sprintf("%s-%07d", prefix, k)
						if ledger {
							batch.Queue(ledgerInsert, benchProjection, benchFork, id)
						}
						batch.Queue(ceilingUpsert, id, fmt.Sprintf("e-%d", k%1000), at, int64(k+1))
					}
					err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
					if err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
		}
		for range conns {
			if err := <-errc; err != nil {
				return 0, fmt.Errorf("ceiling upsert: %w", err)
			}
		}
		return float64(per*conns) / time.Since(start).Seconds(), nil
	}
	var one, par, led []float64
	for rep := range b.sizes.Reps {
		x, err := run(1, fmt.Sprintf("c1r%d", rep), false)
		if err != nil {
			return err
		}
		y, err := run(b.sizes.Partitions, fmt.Sprintf("cpr%d", rep), false)
		if err != nil {
			return err
		}
		z, err := run(b.sizes.Partitions, fmt.Sprintf("clr%d", rep), true)
		if err != nil {
			return err
		}
		one, par, led = append(one, x), append(par, y), append(led, z)
	}
	c := Ceiling{Rows: n, RowsPerSecOneConn: median(one), RowsPerSecParallel: median(par), WithLedgerPerSec: median(led)}
	c.RowsPerSec = max(c.RowsPerSecOneConn, c.RowsPerSecParallel)
	b.res.Ceiling = c
	b.progress("ceiling: pgx batched upsert %.0f rows/s (1 conn), %.0f rows/s (%d conns); with a dedupe-ledger row per event %.0f events/s (median of %d)",
		c.RowsPerSecOneConn, c.RowsPerSecParallel, b.sizes.Partitions, c.WithLedgerPerSec, b.sizes.Reps)
	return nil
}

// ---- 2. inline ----

func (b *bench) inlineRuns(ctx context.Context) error {
	for i, pctv := range b.sizes.FailRates {
		run, err := b.inline(ctx, pctv, b.sizes.Inline[i])
		if err != nil {
			return err
		}
		b.res.Inline = append(b.res.Inline, run)
		b.progress("inline %g%% failing: %.0f events/s, p50 %.1f ms, p99 %.1f ms (paced at %.0f/s), bridge peak RSS %.0f MB",
			pctv, run.EventsPerSec, run.P50Ms, run.P99Ms, run.LatencyRate, run.PeakRSSMB)
	}
	return nil
}

func (b *bench) inline(ctx context.Context, failPct float64, n int) (InlineRun, error) {
	run := InlineRun{FailPct: failPct, Events: n}
	reps := b.sizes.Reps
	if failPct > 1 {
		reps = 1 // hand-off bound: minutes per repetition, little noise
	}
	for rep := range reps {
		last := rep == reps-1
		if err := b.inlineRep(ctx, &run, rep, last); err != nil {
			return run, err
		}
	}
	run.EventsPerSec = median(run.EventsPerSecReps)
	return run, nil
}

// inlineRep drains n pre-produced events through a fresh bridge; on the
// last repetition it also runs the paced latency phase and reads the RSS.
func (b *bench) inlineRep(ctx context.Context, run *InlineRun, rep int, last bool) error {
	failPct, n := run.FailPct, run.Events
	phase := fmt.Sprintf("inline%g-r%d", failPct, rep)
	topic, err := b.topic(ctx, phase)
	if err != nil {
		return err
	}
	prefix := b.runID + "-" + phase
	recs, nf := records(topic, prefix+"-d", n, failPct, time.Now())
	run.Failing = nf
	if err := b.produce(ctx, recs); err != nil {
		return err
	}
	p, err := b.startBridge(ctx, phase, map[string]string{
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_CONSUMER_GROUP": topic + "-g", "CAUSET_TASK_QUEUE": b.handoffQueue(),
	})
	if err != nil {
		return err
	}
	defer p.stop()
	ok := float64(n - nf)
	elapsed, cpu, err := b.waitBridge(ctx, p, 10*time.Minute, func(c counters) (bool, error) {
		return c.applied+c.duplicate >= ok && c.handedOff >= float64(nf), nil
	})
	if err != nil {
		return err
	}
	eps := float64(n) / elapsed.Seconds()
	run.EventsPerSecReps = append(run.EventsPerSecReps, eps)
	run.CPUReps = append(run.CPUReps, cpu)
	if nf > 0 {
		run.StartsPerSec = float64(nf) / elapsed.Seconds()
	}
	b.progress("  inline %g%% rep %d: %.0f events/s; cores used: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f, bench+kfake %.2f",
		failPct, rep+1, eps, cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, cpu.Bench)
	if !last {
		return nil
	}

	// Paced phase: half the drained rate, stamped at produce time.
	rate := median(run.EventsPerSecReps) / 2
	sent, sentFail, err := b.paced(ctx, topic, prefix+"-l", rate, time.Duration(b.sizes.LatencySeconds*float64(time.Second)), failPct)
	if err != nil {
		return err
	}
	run.LatencyRate = rate
	if _, _, err := b.waitBridge(ctx, p, 2*time.Minute, func(c counters) (bool, error) {
		return c.applied+c.duplicate >= ok+float64(sent-sentFail) && c.handedOff >= float64(nf+sentFail), nil
	}); err != nil {
		return fmt.Errorf("paced phase: %w", err)
	}
	err = b.pool.QueryRow(ctx, `SELECT count(*),
  coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
  coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0)
FROM (SELECT (extract(epoch FROM applied_at - produced_at) * 1000)::float8 AS ms
      FROM bench_rows WHERE event_id >= $1 AND event_id < $2) s`, prefix+"-l-", prefix+"-l.").Scan(&run.LatencySamples, &run.P50Ms, &run.P99Ms)
	if err != nil {
		return fmt.Errorf("latency query: %w", err)
	}
	_, peak, err := rss(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	run.PeakRSSMB = peak
	return nil
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// paced produces events at rate per second for d, each stamped with the
// time it is handed to the producer, and returns how many it sent and how
// many of them fail.
func (b *bench) paced(ctx context.Context, topic, prefix string, rate float64, d time.Duration, failPct float64) (int, int, error) {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent, nf := 0, 0
	var perr atomic.Value
	var wg sync.WaitGroup
	for now := start; now.Sub(start) < d; now = <-t.C {
		want := int(rate * now.Sub(start).Seconds())
		for ; sent < want; sent++ {
			id := fmt.Sprintf("%s-%07d", prefix, sent)
			entity := fmt.Sprintf("e-%s-%d", prefix, sent%1000)
			f := failing(sent, failPct)
			if f {
				entity = "fail-" + id
				nf++
			}
			v, _ := json.Marshal(envelope(id, entity, sent, f, time.Now()))
			wg.Add(1)
			b.prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(entity), Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
				wg.Done()
			})
		}
	}
	wg.Wait()
	if err, _ := perr.Load().(error); err != nil {
		return sent, nf, fmt.Errorf("paced produce: %w", err)
	}
	return sent, nf, nil
}

// ---- 3. workflow mode ----

func (b *bench) workflowMode(ctx context.Context) error {
	n := b.sizes.Workflow
	topic, err := b.topic(ctx, "workflow")
	if err != nil {
		return err
	}
	prefix := b.runID + "-workflow"
	recs, _ := records(topic, prefix, n, 0, time.Now())
	if err := b.produce(ctx, recs); err != nil {
		return err
	}
	p, err := b.startBridge(ctx, "workflow", map[string]string{
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_CONSUMER_GROUP": topic + "-g", "CAUSET_TASK_QUEUE": b.workQueue,
		"CAUSET_BRIDGE_MODE": "workflow", "CAUSET_ORDERING": "none", // workflow mode keeps no entity order
	})
	if err != nil {
		return err
	}
	defer p.stop()
	var lastCheck time.Time
	elapsed, cpu, err := b.waitBridge(ctx, p, 10*time.Minute, func(c counters) (bool, error) {
		if time.Since(lastCheck) < 100*time.Millisecond {
			return false, nil
		}
		lastCheck = time.Now()
		got, err := b.rowsWithPrefix(ctx, prefix)
		return got >= n, err
	})
	if err != nil {
		return err
	}
	_, peak, _ := rss(p.cmd.Process.Pid)
	b.res.Workflow = WorkflowRun{Events: n, EventsPerSec: float64(n) / elapsed.Seconds(), PeakRSSMB: peak, CPU: cpu}
	b.progress("workflow mode: %.1f events/s (%d events, every one a workflow); cores used: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f, bench+worker %.2f",
		b.res.Workflow.EventsPerSec, n, cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, cpu.Bench)
	return nil
}

// ---- 4. peer ----

func (b *bench) peerRuns(ctx context.Context) error {
	for i, pctv := range b.sizes.PeerFailRates {
		n := b.sizes.Peer[i]
		reps := b.sizes.Reps
		if pctv > 0 {
			reps = 1 // bound by the in-place retry sleeps: no noise to speak of
		}
		run := PeerRun{FailPct: pctv, Events: n}
		for rep := range reps {
			phase := fmt.Sprintf("peer%g-r%d", pctv, rep)
			topic, err := b.topic(ctx, phase)
			if err != nil {
				return err
			}
			recs, nf := records(topic, b.runID+"-"+phase, n, pctv, time.Now())
			if err := b.produce(ctx, recs); err != nil {
				return err
			}
			s0 := b.sample(0)
			elapsed, dl, err := runPeer(ctx, b.brokers, topic, topic+"-g", b.dlqTopic, b.engine, b.short, n)
			if err != nil {
				return err
			}
			cpu := s0.use(b.sample(0))
			run.Failing, run.DeadLettered = nf, dl
			run.EventsPerSecReps = append(run.EventsPerSecReps, float64(n)/elapsed.Seconds())
			run.CPUReps = append(run.CPUReps, cpu)
			b.progress("  peer %g%% rep %d: %.0f events/s; cores used: machine %.2f, peer+kfake %.2f, postgres %.2f",
				pctv, rep+1, float64(n)/elapsed.Seconds(), cpu.MachineBusy, cpu.Bench, cpu.Postgres)
		}
		run.EventsPerSec = median(run.EventsPerSecReps)
		b.res.Peer = append(b.res.Peer, run)
		b.progress("peer %g%% failing: %.0f events/s (%d dead-lettered after in-place retries)", pctv, run.EventsPerSec, run.DeadLettered)
	}
	return nil
}

// ---- 5. schedule accuracy ----

func (b *bench) schedule(ctx context.Context) error {
	n := b.sizes.Schedule
	topic, err := b.topic(ctx, "schedule")
	if err != nil {
		return err
	}
	prefix := b.runID + "-schedule"
	recs, _ := records(topic, prefix, n, 100, time.Now())
	if err := b.produce(ctx, recs); err != nil {
		return err
	}
	p, err := b.startBridge(ctx, "schedule", map[string]string{
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_CONSUMER_GROUP": topic + "-g", "CAUSET_TASK_QUEUE": b.workQueue,
		"PROJECTION_WORKER_MAX_RETRIES": "5", "PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "2", "PROJECTION_WORKER_RETRY_MAX_MS": "30000",
	})
	if err != nil {
		return err
	}
	defer p.stop()
	if _, _, err := b.waitBridge(ctx, p, 2*time.Minute, func(c counters) (bool, error) { return c.handedOff >= float64(n), nil }); err != nil {
		return err
	}
	plan := config.DefaultRetry().Plan(config.ModeInline)
	run := ScheduleRun{Events: n}
	for _, o := range plan.Offsets {
		run.ExpectedS = append(run.ExpectedS, o.Seconds())
	}
	deadline := time.Now().Add(plan.Offsets[len(plan.Offsets)-1] + time.Minute)
	for i := range n {
		id := workflows.RetryWorkflowID(benchProjection, benchFork, fmt.Sprintf("%s-%07d", prefix, i))
		var st workflows.Status
		for {
			v, err := b.tc.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
			if err == nil {
				err = v.Get(&st)
			}
			if err == nil && len(st.Attempts) >= len(plan.Offsets) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("workflow %s: %d of %d attempts after the schedule plus a minute (last error %v)", id, len(st.Attempts), len(plan.Offsets), err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		var obs []float64
		t0 := st.Attempts[0].StartedAt
		for k, a := range st.Attempts[:len(plan.Offsets)] {
			off := a.StartedAt.Sub(t0)
			obs = append(obs, off.Seconds())
			run.LatenessMaxS = max(run.LatenessMaxS, (off - plan.Offsets[k]).Seconds())
		}
		run.ObservedS = append(run.ObservedS, obs)
	}
	b.res.Schedule = run
	b.progress("schedule accuracy: expected %s s, observed %v, worst lateness %.3f s", floats(run.ExpectedS, 0), run.ObservedS, run.LatenessMaxS)
	return nil
}

// ---- 6 + 7. hand-off capacity and in-flight memory ----

func (b *bench) handoff(ctx context.Context) error {
	n := b.sizes.Handoff
	conc := b.sizes.MaxInflight
	half := n / 2
	raw1, err := b.rawStarts(ctx, b.runID+"-raw1", half, conc)
	if err != nil {
		return err
	}

	topic, err := b.topic(ctx, "handoff")
	if err != nil {
		return err
	}
	prefix := b.runID + "-handoff"
	recs, _ := records(topic, prefix, n, 100, time.Now())
	if err := b.produce(ctx, recs); err != nil {
		return err
	}
	p, err := b.startBridge(ctx, "handoff", map[string]string{
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_CONSUMER_GROUP": topic + "-g", "CAUSET_TASK_QUEUE": b.handoffQueue(),
		"PROJECTION_WORKER_MAX_RETRIES": strconv.Itoa(longRetry.MaxAttempts), "PROJECTION_WORKER_RETRY_INITIAL_MS": strconv.FormatInt(longRetry.Initial.Milliseconds(), 10),
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "2", "PROJECTION_WORKER_RETRY_MAX_MS": strconv.FormatInt(longRetry.Max.Milliseconds(), 10),
	})
	if err != nil {
		return err
	}
	elapsed, cpu, err := b.waitBridge(ctx, p, 15*time.Minute, func(c counters) (bool, error) { return c.handedOff >= float64(n), nil })
	if err != nil {
		p.stop()
		return err
	}
	// Let the bridge commit and settle, then read its memory.
	time.Sleep(2 * time.Second)
	cur, peak, err := rss(p.cmd.Process.Pid)
	p.stop()
	if err != nil {
		return err
	}
	b.res.InFlight = InFlightRun{Failures: n, RSSMB: cur, PeakRSSMB: peak}

	raw2, err := b.rawStarts(ctx, b.runID+"-raw2", n-half, conc)
	if err != nil {
		return err
	}
	rawRate := float64(n) / (raw1.d + raw2.d).Seconds()
	b.res.Handoff = HandoffRun{Events: n, Concurrency: conc, BridgeStartsPerSec: float64(n) / elapsed.Seconds(), RawStartsPerSec: rawRate,
		RawBeforePerSec: float64(half) / raw1.d.Seconds(), RawAfterPerSec: float64(n-half) / raw2.d.Seconds(),
		BridgeCPU: cpu, RawCPU: raw1.cpu}
	b.progress("  hand-off cores used: bridge run: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f; raw run: machine %.2f, bench %.2f, temporal %.2f; raw before %.0f/s, after %.0f/s",
		cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, raw1.cpu.MachineBusy, raw1.cpu.Bench, raw1.cpu.Temporal, b.res.Handoff.RawBeforePerSec, b.res.Handoff.RawAfterPerSec)
	b.progress("hand-off: bridge %.0f workflow starts/s at 100%% failing, raw ExecuteWorkflow %.0f/s (%d concurrent)", b.res.Handoff.BridgeStartsPerSec, rawRate, conc)
	b.progress("in flight: bridge RSS %.0f MB (peak %.0f MB) with %d failures handed off and retrying", cur, peak, n)
	return nil
}

// rawStarts makes n ExecuteWorkflow calls for the retry workflow, with the
// bridge's start options, from conc goroutines, and returns the time taken.
type timed struct {
	d   time.Duration
	cpu CPUUse
}

func (b *bench) rawStarts(ctx context.Context, prefix string, n, conc int) (timed, error) {
	s0 := b.sample(0)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				id := fmt.Sprintf("%s-%07d", prefix, i)
				in := workflows.RetryInput{
					Event: envelope(id, "fail-"+id, i, true, time.Now()), Projection: benchProjection, Key: []byte("fail-" + id),
					Source: workflows.Source{Topic: "raw", Partition: 0, Offset: int64(i)}, Mode: config.ModeInline,
					FirstAttempt: &workflows.Attempt{Number: 1, StartedAt: time.Now(), ErrorKind: "ir_eval", Error: "division by zero"},
					Retry:        longRetry, ReplayWindow: workflows.DefaultReplayWindow,
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := b.tc.ExecuteWorkflow(sctx, starter.StartOptions(b.handoffQueue(), in), workflows.RetryWorkflowName, in)
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return timed{}, fmt.Errorf("raw ExecuteWorkflow: %w", err)
	}
	return timed{d: time.Since(start), cpu: s0.use(b.sample(0))}, nil
}

// ---- helpers ----

func retryEnv(r config.Retry) map[string]string {
	return map[string]string{
		"PROJECTION_WORKER_MAX_RETRIES":      strconv.Itoa(r.MaxAttempts),
		"PROJECTION_WORKER_RETRY_INITIAL_MS": strconv.FormatInt(r.Initial.Milliseconds(), 10),
		"PROJECTION_WORKER_RETRY_MULTIPLIER": strconv.FormatFloat(r.Multiplier, 'g', -1, 64),
		"PROJECTION_WORKER_RETRY_MAX_MS":     strconv.FormatInt(r.Max.Milliseconds(), 10),
	}
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
