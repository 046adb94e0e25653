package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is one test's Kafka topics, database, projection engine and
// Temporal task queue.
type harness struct {
	t         testing.TB
	ctx       context.Context
	brokers   []string
	topic     string
	dlqTopic  string
	group     string
	pool      *pgxpool.Pool
	engine    *projection.Engine
	temporal  testenv.TemporalServer
	taskQueue string
	producer  *kgo.Client
	logs      *testenv.LogBuffer
	logger    *slog.Logger
	// prefix makes this test's event IDs (and so workflow IDs) unique on
	// the Temporal server shared by every test of the binary.
	prefix string
	// workers are the Temporal workers the test started.
	workers []interface{ Stop() }
	// workerSlots bounds the activities a worker runs at once (0: the
	// worker's default).
	workerSlots int
}

type harnessOptions struct {
	partitions int32
	// followersDDL replaces artist_followers' DDL (e.g. testenv.FollowersNoFollowedAtDDL).
	followersDDL string
	// noTemporal skips the Temporal dev server (tests with a fake starter).
	noTemporal bool
}

func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, logs: &testenv.LogBuffer{}, prefix: fmt.Sprintf("t%x-", time.Now().UnixNano())}
	h.logger = slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: testLogLevel()}))
	t.Cleanup(func() { h.logTailOnFailure(200) })
	h.brokers = testenv.Kafka(t)
	h.topic = testenv.Topic(t, "causet.events.v1")
	h.dlqTopic = testenv.Topic(t, "causet.dlq")
	h.group = testenv.Topic(t, "group")
	testenv.CreateTopic(t, h.brokers, h.topic, o.partitions)
	testenv.CreateTopic(t, h.brokers, h.dlqTopic, 1)

	h.pool = testenv.Postgres(t)
	for _, name := range exampleprojections.Names() {
		ddl, err := exampleprojections.DDL(name)
		require.NoError(t, err)
		if name == "artist_followers" && o.followersDDL != "" {
			ddl = o.followersDDL
		}
		_, err = h.pool.Exec(ctx, ddl)
		require.NoError(t, err)
		raw, err := exampleprojections.Document(name)
		require.NoError(t, err)
		doc, err := projection.Parse(raw)
		require.NoError(t, err)
		_, err = projection.Deploy(ctx, h.pool, doc)
		require.NoError(t, err)
	}
	engine, err := projection.NewEngine(ctx, h.pool, h.logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	h.engine = engine

	if !o.noTemporal {
		h.temporal = testenv.Temporal(t)
		h.taskQueue = testenv.TaskQueue(t)
		t.Cleanup(h.terminateOpenWorkflows)
	}
	h.producer, err = kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(h.topic))
	require.NoError(t, err)
	t.Cleanup(h.producer.Close)
	return h
}

// workingHarness is a harness with ddl run on its database, a running
// worker and Bridge options that back off at most 200ms; when the test
// fails its log is written to $BRIDGE_TEST_LOG, if set.
func workingHarness(t *testing.T, o harnessOptions, ddl string) (*harness, Options) {
	t.Helper()
	h := newHarness(t, o)
	_, err := h.pool.Exec(h.ctx, ddl)
	require.NoError(t, err)
	h.startWorker()
	t.Cleanup(func() {
		if f := os.Getenv("BRIDGE_TEST_LOG"); f != "" && t.Failed() {
			_ = os.WriteFile(f, []byte(h.logs.String()), 0o644)
		}
	})
	opts := h.options(nil)
	opts.MaxBackoff = 200 * time.Millisecond
	return h, opts
}

// options are Bridge options for this harness; starter may be nil to use the
// Temporal client.
func (h *harness) options(starter WorkflowStarter) Options {
	if starter == nil {
		starter = h.temporal.Client
	}
	return Options{
		Brokers:        h.brokers,
		Topic:          h.topic,
		Group:          h.group,
		DLQTopic:       h.dlqTopic,
		TaskQueue:      h.taskQueue,
		Engine:         h.engine,
		Starter:        starter,
		Parking:        parking.NewStore(h.pool),
		Probe:          h.pool.Ping,
		Logger:         h.logger,
		Registerer:     prometheus.NewRegistry(),
		CommitInterval: 100 * time.Millisecond,
		MaxBackoff:     time.Second,
		MaxPollRecords: 200,
	}
}

// plainOptions are options with CAUSET_ORDERING=none: failures are plain
// concurrent hand-offs (tests of that behaviour).
func (h *harness) plainOptions(starter WorkflowStarter) Options {
	o := h.options(starter)
	o.Ordering = config.OrderingNone
	return o
}

// running is a bridge running in a goroutine.
type running struct {
	b      *Bridge
	cancel context.CancelFunc
	done   chan error
}

// start runs a bridge until stopped (or until the test ends).
func (h *harness) start(o Options) *running {
	h.t.Helper()
	b, err := New(o)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{b: b, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	h.t.Cleanup(func() { r.stop(h.t) })
	return r
}

// stop cancels the bridge and waits for Run to return (idempotent).
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			require.NoError(t, err)
			close(r.done)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("bridge did not stop within 60s")
	}
}

// crash leaves the group as a killed bridge would: nothing it processed is
// committed. The bridge stops cleanly, then the group, empty again, is
// deleted with its offsets; a crashing test commits nothing before
// (CommitInterval of an hour), so the offsets deleted are only those of the
// stop.
func (h *harness) crash(r *running) {
	h.t.Helper()
	r.stop(h.t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...))
	require.NoError(h.t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).DeleteGroup(h.ctx, h.group)
	require.NoError(h.t, err)
	require.NoError(h.t, resp.Err)
}

// produce writes events (JSON envelopes, key = entityId) to given partitions.
func (h *harness) produce(recs ...*kgo.Record) {
	h.t.Helper()
	require.NoError(h.t, h.producer.ProduceSync(h.ctx, recs...).FirstErr())
}

func envRecord(partition int32, ev event.Envelope) *kgo.Record {
	v, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Partition: partition, Key: []byte(ev.EntityID), Value: v}
}

var occurred = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func followed(id, user, artist string) event.Envelope {
	return event.Envelope{EventID: id, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production",
		OccurredAt: occurred, Payload: json.RawMessage(fmt.Sprintf(`{"artistId":%q}`, artist))}
}

func played(id, artist string, plays, days int) event.Envelope {
	return event.Envelope{EventID: id, EventType: "TRACK_PLAYED", EntityID: artist, ForkID: "production",
		OccurredAt: occurred, Payload: json.RawMessage(fmt.Sprintf(`{"artistId":%q,"plays":%d,"days":%d}`, artist, plays, days))}
}

func unlisted(id, entity string) event.Envelope {
	return event.Envelope{EventID: id, EventType: "PLAYLIST_RENAMED", EntityID: entity, ForkID: "production",
		OccurredAt: occurred, Payload: json.RawMessage(`{"name":"x"}`)}
}

// count runs a count(*) (or any single int) query.
func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.pool.QueryRow(h.ctx, sql, args...).Scan(&n))
	return n
}

// committed returns the group's committed offset per partition of the
// topic (empty when nothing is committed or offsets cannot be read).
func (h *harness) committed() map[int32]int64 {
	h.t.Helper()
	return testenv.CommittedOffsets(h.t, h.brokers, h.group, h.topic)
}

// endOffsets returns the topic's end offset per partition.
func (h *harness) endOffsets() map[int32]int64 {
	h.t.Helper()
	return testenv.EndOffsets(h.t, h.brokers, h.topic)
}

// waitCommittedToEnd waits until every partition is committed to its end.
func (h *harness) waitCommittedToEnd(within time.Duration) {
	h.t.Helper()
	testenv.RequireCommittedToEnd(h.t, h.brokers, h.group, h.topic, within)
}

// workflowsOnQueue lists the executions started on this test's task queue.
func (h *harness) workflowsOnQueue() []string {
	h.t.Helper()
	return testenv.WorkflowIDs(h.temporal.WorkflowsOnQueue(h.t, h.taskQueue, ""))
}

// startedInput returns the input of the workflow's first run and its description.
func (h *harness) startedInput(id string) (contract.RetryInput, *workflowservice.DescribeWorkflowExecutionResponse) {
	h.t.Helper()
	desc, err := h.describe(id)
	require.NoError(h.t, err)
	it := h.temporal.Client.GetWorkflowHistory(h.ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ev, err := it.Next()
	require.NoError(h.t, err)
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(h.t, attrs)
	var in contract.RetryInput
	require.NoError(h.t, converter.GetDefaultDataConverter().FromPayloads(attrs.Input, &in))
	return in, desc
}

// searchAttrs decodes the Keyword search attributes of a description.
func searchAttrs(t testing.TB, desc *workflowservice.DescribeWorkflowExecutionResponse) map[string]string {
	out := map[string]string{}
	for k, p := range desc.WorkflowExecutionInfo.GetSearchAttributes().GetIndexedFields() {
		var s string
		if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err == nil {
			out[k] = s
		}
	}
	return out
}

// recordingStarter counts start calls per workflow ID and can simulate a
// Temporal outage.
type recordingStarter struct {
	inner WorkflowStarter
	down  atomic.Bool
	calls atomic.Int64
	fails atomic.Int64

	mu      sync.Mutex
	started map[string]int // successful starts per ID
}

func newRecordingStarter(inner WorkflowStarter) *recordingStarter {
	return &recordingStarter{inner: inner, started: map[string]int{}}
}

func (s *recordingStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	s.calls.Add(1)
	if s.down.Load() {
		s.fails.Add(1)
		return nil, serviceerror.NewUnavailable("temporal is down (test)")
	}
	var run client.WorkflowRun
	if s.inner != nil {
		var err error
		run, err = s.inner.ExecuteWorkflow(ctx, o, wf, args...)
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		if err != nil && !errors.As(err, &already) {
			return nil, err
		}
	}
	s.mu.Lock()
	s.started[o.ID]++
	s.mu.Unlock()
	return run, nil
}

// DescribeWorkflowExecution passes through to inner when it describes (a
// recording starter without a Temporal client describes nothing).
func (s *recordingStarter) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if d, ok := s.inner.(contract.Describer); ok {
		return d.DescribeWorkflowExecution(ctx, id, runID)
	}
	return nil, serviceerror.NewUnavailable("no Temporal (test)")
}

func (s *recordingStarter) ids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.started))
	for k, v := range s.started {
		out[k] = v
	}
	return out
}

// terminateOpenWorkflows ends the workflows still open on this test's task
// queue once its bridge and worker have stopped. Every test of the binary
// shares one dev server, and lane and incident IDs name the key or the
// failure, not the test: a lane left open on a queue nobody polls any more
// would take a later test's events of a key with the same name (start
// policy USE_EXISTING) and never run them.
func (h *harness) terminateOpenWorkflows() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, run := range h.temporal.WorkflowsOnQueue(h.t, h.taskQueue, "") {
		if !run.Running() {
			continue
		}
		if err := h.temporal.Client.TerminateWorkflow(ctx, run.ID, run.RunID, "test ended"); err != nil {
			var nf *serviceerror.NotFound
			if !errors.As(err, &nf) { // it closed since it was listed
				h.t.Errorf("terminate %s (%s) left open by the test: %v", run.ID, run.Type, err)
			}
		}
	}
}

// logTailOnFailure writes the last n lines of the bridge's and worker's
// log to the test's output when the test failed, so a failure in CI comes
// with what the bridge was doing.
func (h *harness) logTailOnFailure(n int) {
	if !h.t.Failed() {
		return
	}
	all := h.logs.String()
	if dir := os.Getenv("CAUSET_TEST_LOGS"); dir != "" {
		path := filepath.Join(dir, strings.ReplaceAll(h.t.Name(), "/", "_")+".log")
		if err := os.WriteFile(path, []byte(all), 0o644); err == nil {
			h.t.Logf("bridge log: %s", path)
		}
	}
	lines := strings.Split(strings.TrimRight(all, "\n"), "\n")
	if len(lines) > n {
		h.t.Logf("bridge log: %d earlier lines left out", len(lines)-n)
		lines = lines[len(lines)-n:]
	}
	h.t.Logf("bridge log, last %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
}

// historyOnFailure keeps a run's history beside the bridge log when the
// test fails, and logs the activities it waits on, so a run that never
// ended says where it stood.
func (h *harness) historyOnFailure(id, runID string) {
	h.t.Cleanup(func() {
		if !h.t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if desc, err := h.temporal.Client.DescribeWorkflow(ctx, id, runID); err == nil && desc.RawResponse != nil {
			d := desc.RawResponse
			for _, a := range d.PendingActivities {
				h.t.Logf("run %s waits on activity %s: attempt %d, state %s, last failure %q",
					runID, a.GetActivityType().GetName(), a.GetAttempt(), a.GetState(), a.GetLastFailure().GetMessage())
			}
		}
		if dir := os.Getenv("CAUSET_TEST_LOGS"); dir != "" {
			path := filepath.Join(dir, strings.ReplaceAll(h.t.Name(), "/", "_")+"-"+runID+".json")
			testenv.WriteHistory(h.t, ctx, h.temporal.Client, id, runID, path)
			h.t.Logf("history of %s: %s", id, path)
		}
	})
}

// total sums every series of a counter or gauge vector.
func total(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		sum += value(m)
	}
	return sum
}

// value reads a counter or gauge (prometheus/testutil would need a go.sum entry).
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}

func testLogLevel() slog.Level {
	if os.Getenv("BRIDGE_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func kgoOffset(o int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: -1, Offset: o} }

// describe returns the workflow's description through the raw service API.
func (h *harness) describe(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return h.temporal.DescribeWorkflow(id)
}

// moveTo puts the harness's topics (partitions each) and producer (with
// extra options) on brokers, for a test whose Kafka is not testenv.Kafka's
// (a cluster behind a peer that hangs).
func (h *harness) moveTo(brokers []string, partitions int32, extra ...kgo.Opt) {
	h.t.Helper()
	h.brokers = brokers
	testenv.CreateTopic(h.t, brokers, h.topic, partitions)
	testenv.CreateTopic(h.t, brokers, h.dlqTopic, 1)
	producer, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(h.topic)}, extra...)...)
	require.NoError(h.t, err)
	h.t.Cleanup(producer.Close)
	h.producer = producer
}
