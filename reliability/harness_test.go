package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ---------------------------------------------------------------- gate

type profile string

const (
	profileShort profile = "short"
	profileFull  profile = "full"
)

// gate skips the test unless the suite is enabled and returns the profile.
func gate(t *testing.T) profile {
	t.Helper()
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY")))
	p := strings.ToLower(strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY_PROFILE")))
	if v == "" || v == "0" || v == "false" {
		if p == "" {
			t.Skip("reliability suite is heavy (kills, outages, 50,000 events): set CAUSET_RELIABILITY=1 " +
				"(or CAUSET_RELIABILITY_PROFILE=short|full), or run scripts/reliability.sh / make reliability")
		}
	}
	switch {
	case p == "short" || p == "full":
		return profile(p)
	case v == "short":
		return profileShort
	default:
		return profileFull
	}
}

// pick returns short or full by profile.
func pick[T any](p profile, short, full T) T {
	if p == profileShort {
		return short
	}
	return full
}

// ---------------------------------------------------------------- report

// result collects a scenario's figures and prints the RELIABILITY line.
type result struct {
	t       *testing.T
	name    string
	lost    int
	double  int
	dupWF   int
	figures []string
}

func newResult(t *testing.T, name string) *result {
	r := &result{t: t, name: name}
	t.Cleanup(r.print)
	return r
}

// fig records a figure (key=value) for the RELIABILITY line and the test log.
func (r *result) fig(key string, v any) {
	s := fmt.Sprint(v)
	s = strings.ReplaceAll(s, " ", "_")
	r.figures = append(r.figures, key+"="+s)
	r.t.Logf("%s: %s = %v", r.name, key, v)
}

func (r *result) print() {
	line := fmt.Sprintf("RELIABILITY scenario=%s passed=%t lost=%d double_applied=%d duplicate_workflows=%d",
		r.name, !r.t.Failed() && !r.t.Skipped(), r.lost, r.double, r.dupWF)
	if len(r.figures) > 0 {
		line += " " + strings.Join(r.figures, " ")
	}
	r.t.Log(line)
	fmt.Fprintln(os.Stdout, line)
}

// ---------------------------------------------------------------- binary

var binOnce struct {
	sync.Once
	path string
	err  error
}

// causetBin builds cmd/causet once per test binary (or uses CAUSET_BIN).
func causetBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("CAUSET_BIN"); p != "" {
			binOnce.path = p
			return
		}
		root, err := testenv.RepoRoot()
		if err != nil {
			binOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "causet-reliability-bin-")
		if err != nil {
			binOnce.err = err
			return
		}
		binOnce.path = filepath.Join(dir, "causet")
		cmd := exec.Command("go", "build", "-o", binOnce.path, "./cmd/causet")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			binOnce.err = fmt.Errorf("go build ./cmd/causet: %v\n%s", err, out)
		}
	})
	require.NoError(t, binOnce.err)
	return binOnce.path
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ---------------------------------------------------------------- stack

// relIR is an increment projection: every applied event adds 1 to its own
// row's n, so a double apply shows as n=2 and a lost event as a missing row.
// Events with payload.d = 0 fail with "division by zero" (ir_eval) on every
// attempt and so are retried by Temporal and dead-lettered.
const relIR = `
name: rel_effects
version: 1
source_events: [REL_EVENT]
table: rel_effects
key: [event_id]
on:
  REL_EVENT:
    op: increment
    columns:
      event_id: event.eventId
      ratio: event.payload.one / event.payload.d
    increment:
      n: event.payload.one
`

const relDDL = `CREATE TABLE rel_effects (event_id text PRIMARY KEY, ratio bigint, n bigint NOT NULL DEFAULT 0)`

const relProjection = "rel_effects"

// stack is one scenario's database, topics, group, task queue and Temporal.
type stack struct {
	t          *testing.T
	ctx        context.Context
	bin        string
	dir        string
	pool       *pgxpool.Pool
	dbURL      string
	brokers    []string
	topic      string
	dlqTopic   string
	group      string
	taskQueue  string
	temporal   string // host:port
	namespace  string
	tc         client.Client
	prefix     string
	producer   *kgo.Client
	partitions int32
	// env overrides for every process started from this stack.
	env map[string]string
}

type stackOptions struct {
	partitions int32
	// brokers: when nil, testenv.Kafka(t).
	brokers []string
	// temporal: host:port of a Temporal frontend; when empty, testenv.Temporal.
	temporal string
	// topicConfig for the events and DLQ topics (e.g. max.message.bytes).
	topicConfig map[string]*string
	// producerOpts are extra options for the test's producer.
	producerOpts []kgo.Opt
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 6
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	if keep := os.Getenv("CAUSET_RELIABILITY_LOGS"); keep != "" {
		// Keep the subprocess logs for a post-mortem.
		dir = filepath.Join(keep, t.Name())
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	s := &stack{t: t, ctx: ctx, bin: causetBin(t), dir: dir, partitions: o.partitions,
		prefix: fmt.Sprintf("r%x", time.Now().UnixNano()), env: map[string]string{}}

	s.dbURL = testenv.PostgresURL(t)
	pool, err := pgxpool.New(ctx, s.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s.pool = pool
	require.NoError(t, projection.EnsureSchema(ctx, pool))
	_, err = pool.Exec(ctx, relDDL)
	require.NoError(t, err)
	doc, err := projection.Parse([]byte(relIR))
	require.NoError(t, err)
	_, err = projection.Deploy(ctx, pool, doc)
	require.NoError(t, err)

	s.brokers = o.brokers
	if s.brokers == nil {
		s.brokers = testenv.Kafka(t)
	}
	s.topic = testenv.Topic(t, "causet.events.v1")
	s.dlqTopic = testenv.Topic(t, "causet.projection-dlq.v1")
	s.group = testenv.Topic(t, "group")
	s.createTopic(s.topic, o.partitions, o.topicConfig)
	s.createTopic(s.dlqTopic, 1, o.topicConfig)

	if o.temporal == "" {
		srv := testenv.Temporal(t)
		s.temporal, s.namespace, s.tc = srv.HostPort, srv.Namespace, srv.Client
	} else {
		s.temporal, s.namespace = o.temporal, "default"
		s.tc = dialTemporal(t, o.temporal)
	}
	s.taskQueue = testenv.TaskQueue(t)

	popts := append([]kgo.Opt{kgo.SeedBrokers(s.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(s.topic)}, o.producerOpts...)
	s.producer, err = kgo.NewClient(popts...)
	require.NoError(t, err)
	t.Cleanup(s.producer.Close)
	return s
}

func dialTemporal(t *testing.T, hostPort string) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: "default", Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func (s *stack) createTopic(topic string, partitions int32, configs map[string]*string) {
	s.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...))
	require.NoError(s.t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !strings.Contains(err.Error(), kerr.TopicAlreadyExists.Message) {
		require.NoError(s.t, err)
	}
	require.Eventually(s.t, func() bool {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return false
		}
		d, ok := td[topic]
		if !ok || d.Err != nil || int32(len(d.Partitions)) != partitions {
			return false
		}
		for _, p := range d.Partitions {
			if p.Leader < 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond)
}

// procEnv is the environment of a causet subprocess of this stack.
func (s *stack) procEnv(extra map[string]string) []string {
	env := os.Environ()
	base := map[string]string{
		"DATABASE_URL":                       s.dbURL,
		"KAFKA_BROKERS":                      strings.Join(s.brokers, ","),
		"CAUSET_EVENTS_TOPIC":                s.topic,
		"CAUSET_DLQ_TOPIC":                   s.dlqTopic,
		"CAUSET_CONSUMER_GROUP":              s.group,
		"CAUSET_TASK_QUEUE":                  s.taskQueue,
		"CAUSET_ORDERING":                    "none",
		"CAUSET_BRIDGE_MODE":                 "inline",
		"TEMPORAL_ADDRESS":                   s.temporal,
		"TEMPORAL_NAMESPACE":                 s.namespace,
		"PROJECTION_WORKER_MAX_RETRIES":      "5",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "2",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "30000",
	}
	for k, v := range s.env {
		base[k] = v
	}
	for k, v := range extra {
		base[k] = v
	}
	base["CAUSET_METRICS_ADDR"] = "127.0.0.1:" + strconv.Itoa(freePort(s.t))
	keys := make([]string, 0, len(base))
	for k := range base {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+base[k]) // later entries win
	}
	return env
}

// shortSchedule makes failing events dead-letter within ~1.5 s:
// attempts at 0, 0.1, 0.3, 0.7, 1.5 s.
var shortSchedule = map[string]string{
	"PROJECTION_WORKER_RETRY_INITIAL_MS": "100",
	"PROJECTION_WORKER_RETRY_MULTIPLIER": "2",
	"PROJECTION_WORKER_RETRY_MAX_MS":     "1000",
}

// ---------------------------------------------------------------- processes

// proc is a causet subprocess.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

var procSeq struct {
	sync.Mutex
	n int
}

// start runs `causet <args...>` with the stack's env (+extra); its stderr goes
// to a log file in the stack's dir. It is killed when the test ends.
func (s *stack) start(name string, extra map[string]string, args ...string) *proc {
	s.t.Helper()
	procSeq.Lock()
	procSeq.n++
	n := procSeq.n
	procSeq.Unlock()
	p := &proc{name: name, log: filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, n)), done: make(chan struct{})}
	f, err := os.Create(p.log)
	require.NoError(s.t, err)
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = s.procEnv(extra)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(s.t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	s.t.Cleanup(func() { p.kill() })
	return p
}

func (s *stack) bridge(extra map[string]string) *proc { return s.start("bridge", extra, "bridge") }
func (s *stack) worker(extra map[string]string) *proc { return s.start("worker", extra, "worker") }

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// memKB reads VmRSS and VmHWM (peak RSS) in kB from /proc/<pid>/status.
func (p *proc) memKB() (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return -1, -1
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// logTail returns the last n lines of the process log.
func (p *proc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logCount counts log lines containing s.
func (p *proc) logCount(s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

// ---------------------------------------------------------------- events

// evt is one produced event and where it landed.
type evt struct {
	id        string
	fails     bool
	partition int32
	offset    int64
}

// relEvent builds the record of event i (fails when d = 0).
func (s *stack) relEvent(i int, fails bool) (*kgo.Record, string) {
	id := fmt.Sprintf("%s-%d", s.prefix, i)
	d := 1
	if fails {
		d = 0
	}
	entity := fmt.Sprintf("ent-%d", i%997)
	v := fmt.Sprintf(`{"eventId":%q,"eventType":"REL_EVENT","entityId":%q,"forkId":"production","sequence":%d,"occurredAt":"2026-12-02T12:00:00Z","payload":{"one":1,"d":%d}}`,
		id, entity, i, d)
	return &kgo.Record{Partition: int32(i) % s.partitions, Key: []byte(entity), Value: []byte(v)}, id
}

// produceRange produces events [from, to) (failing when failing(i)) and
// records them in into.
func (s *stack) produceRange(from, to int, failing func(int) bool, into *eventLog) {
	s.t.Helper()
	recs := make([]*kgo.Record, 0, to-from)
	ids := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		r, id := s.relEvent(i, failing(i))
		recs = append(recs, r)
		ids = append(ids, id)
	}
	res := s.producer.ProduceSync(s.ctx, recs...)
	require.NoError(s.t, res.FirstErr())
	// ProduceSync's results come in completion order, not input order.
	index := make(map[*kgo.Record]int, len(recs))
	for k, r := range recs {
		index[r] = k
	}
	for _, r := range res {
		k := index[r.Record]
		into.add(evt{id: ids[k], fails: failing(from + k), partition: r.Record.Partition, offset: r.Record.Offset})
	}
}

// producePaced produces n events in batches over about d, in a goroutine;
// the returned channel closes when all are produced.
func (s *stack) producePaced(n int, d time.Duration, failing func(int) bool, into *eventLog) <-chan struct{} {
	done := make(chan struct{})
	const batch = 250
	batches := (n + batch - 1) / batch
	gap := d / time.Duration(max(batches, 1))
	go func() {
		defer close(done)
		for b := 0; b < batches; b++ {
			from, to := b*batch, min((b+1)*batch, n)
			s.produceRange(from, to, failing, into)
			time.Sleep(gap)
		}
	}()
	return done
}

// eventLog is the list of produced events.
type eventLog struct {
	mu sync.Mutex
	ev []evt
}

func (l *eventLog) add(e evt) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *eventLog) all() []evt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]evt(nil), l.ev...)
}

func (l *eventLog) len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.ev) }

func every(n int) func(int) bool { return func(i int) bool { return n > 0 && i%n == n/2 } }

// ---------------------------------------------------------------- observing

// applied returns n per event_id of the read model.
func (s *stack) applied() map[string]int {
	s.t.Helper()
	rows, err := s.pool.Query(s.ctx, `SELECT event_id, n FROM rel_effects`)
	require.NoError(s.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(s.t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(s.t, rows.Err())
	return out
}

func (s *stack) countSQL(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(s.ctx, sql, args...).Scan(&n))
	return n
}

// tryCount is countSQL that tolerates a database outage (-1).
func (s *stack) tryCount(sql string) int {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	var n int
	if err := s.pool.QueryRow(ctx, sql).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (s *stack) admin() (*kadm.Client, func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...))
	require.NoError(s.t, err)
	return kadm.NewClient(cl), cl.Close
}

// committed returns the group's committed offsets of the events topic.
func (s *stack) committed() map[int32]int64 {
	adm, closeFn := s.admin()
	defer closeFn()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	out := map[int32]int64{}
	offs, err := adm.FetchOffsets(ctx, s.group)
	if err != nil {
		return out
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == s.topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

func (s *stack) endOffsets(topic string) map[int32]int64 {
	s.t.Helper()
	adm, closeFn := s.admin()
	defer closeFn()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(s.t, err)
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// committedToEnd reports whether every partition is committed to its end.
func (s *stack) committedToEnd() bool {
	ends := s.endOffsets(s.topic)
	c := s.committed()
	for p, end := range ends {
		if c[p] != end {
			return false
		}
	}
	return true
}

// waitCommittedToEnd waits until the group has committed every partition to its end.
func (s *stack) waitCommittedToEnd(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if s.committedToEnd() {
			return true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}

// dlqEntry is one DLQ record, decoded.
type dlqEntry struct {
	rec       dlq.Record
	eventID   string
	partition int32
	offset    int64
	size      int
}

// readDLQ reads the whole DLQ topic (up to its current end).
func (s *stack) readDLQ() []dlqEntry {
	s.t.Helper()
	ends := s.endOffsets(s.dlqTopic)
	total := int64(0)
	for _, e := range ends {
		total += e
	}
	if total == 0 {
		return nil
	}
	offsets := map[string]map[int32]kgo.Offset{s.dlqTopic: {}}
	for p := range ends {
		offsets[s.dlqTopic][p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumePartitions(offsets),
		kgo.FetchMaxBytes(128<<20), kgo.FetchMaxPartitionBytes(128<<20), kgo.BrokerMaxReadBytes(256<<20))
	require.NoError(s.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	var out []dlqEntry
	seen := map[int32]int64{}
	for {
		done := true
		for p, e := range ends {
			if seen[p] < e {
				done = false
			}
		}
		if done {
			return out
		}
		fs := cl.PollFetches(ctx)
		require.NoError(s.t, ctx.Err(), "reading the DLQ topic")
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset + 1
			rec, err := dlq.Decode(r.Value)
			require.NoError(s.t, err)
			e := dlqEntry{rec: rec, partition: r.Partition, offset: r.Offset, size: len(r.Value)}
			if rec.Event != nil {
				var env struct {
					EventID string `json:"eventId"`
				}
				_ = json.Unmarshal(*rec.Event, &env)
				e.eventID = env.EventID
			}
			out = append(out, e)
		})
	}
}

// execution is one workflow run seen in visibility.
type execution struct {
	id, runID, status string
	start             time.Time
}

// workflowsOnQueue lists every run started on the stack's task queue.
func (s *stack) workflowsOnQueue() []execution {
	s.t.Helper()
	var out []execution
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.namespace, Query: fmt.Sprintf("TaskQueue = %q", s.taskQueue), NextPageToken: token, PageSize: 1000,
		})
		cancel()
		require.NoError(s.t, err)
		for _, e := range resp.Executions {
			out = append(out, execution{id: e.Execution.WorkflowId, runID: e.Execution.RunId,
				status: e.Status.String(), start: e.StartTime.AsTime()})
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return out
		}
	}
}

// describe returns the workflow's description (nil if not found).
func (s *stack) describe(id string) *workflowservice.DescribeWorkflowExecutionResponse {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	d, err := s.tc.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: s.namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id},
	})
	if err != nil {
		return nil
	}
	return d
}

// status queries a retry workflow's status.
func (s *stack) status(id string) (workflows.Status, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var st workflows.Status
	v, err := s.tc.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return st, err
	}
	return st, v.Get(&st)
}

func wfID(eventID string) string {
	return workflows.RetryWorkflowID(relProjection, "production", eventID)
}

// ---------------------------------------------------------------- verdict

// verdict compares the world with the produced events.
type verdict struct {
	produced, succeeded, failing            int
	lost, doubleApplied, appliedFailing     int
	ledger                                  int
	workflows, dupWorkflows, missingWF      int
	unexpectedWF                            int
	dlq, dlqDup, dlqMissing, dlqUnexpect    int
	examplesLost, examplesDouble, exDLQMiss []string
}

// verify checks effects, ledger, workflows and DLQ against the events.
// checkWF/checkDLQ turn off the workflow/DLQ parts.
func (s *stack) verify(events []evt, checkWF, checkDLQ bool) verdict {
	s.t.Helper()
	var v verdict
	v.produced = len(events)
	app := s.applied()
	failing := map[string]bool{}
	for _, e := range events {
		if e.fails {
			v.failing++
			failing[e.id] = true
			if app[e.id] > 0 {
				v.appliedFailing++
			}
			continue
		}
		v.succeeded++
		switch n := app[e.id]; {
		case n == 0:
			v.lost++
			if len(v.examplesLost) < 5 {
				v.examplesLost = append(v.examplesLost, e.id)
			}
		case n > 1:
			v.doubleApplied += n - 1
			if len(v.examplesDouble) < 5 {
				v.examplesDouble = append(v.examplesDouble, e.id)
			}
		}
	}
	v.ledger = s.countSQL(`SELECT count(*) FROM causet_projection_applied WHERE projection = $1`, relProjection)
	if checkWF {
		runs := map[string]int{}
		for _, e := range s.workflowsOnQueue() {
			runs[e.id]++
		}
		v.workflows = len(runs)
		for id, n := range runs {
			if n > 1 {
				v.dupWorkflows += n - 1
			}
			_ = id
		}
		for id := range failing {
			if runs[wfID(id)] == 0 {
				v.missingWF++
			}
		}
		for id := range runs {
			ok := false
			if strings.HasPrefix(id, "projection-retry:"+relProjection+":production:") {
				ok = failing[strings.TrimPrefix(id, "projection-retry:"+relProjection+":production:")]
			}
			if !ok {
				v.unexpectedWF++
			}
		}
	}
	if checkDLQ {
		counts := map[string]int{}
		for _, d := range s.readDLQ() {
			counts[d.eventID]++
		}
		for id, n := range counts {
			v.dlq += n
			if n > 1 {
				v.dlqDup += n - 1
			}
			if !failing[id] {
				v.dlqUnexpect += n
			}
		}
		for id := range failing {
			if counts[id] == 0 {
				v.dlqMissing++
				if len(v.exDLQMiss) < 5 {
					v.exDLQMiss = append(v.exDLQMiss, id)
				}
			}
		}
	}
	return v
}

// report puts the verdict into the result and asserts it.
func (r *result) verdict(v verdict, checkWF, checkDLQ bool) {
	t := r.t
	r.lost = v.lost
	r.double = v.doubleApplied
	r.dupWF = v.dupWorkflows
	r.fig("events", v.produced)
	r.fig("succeeding", v.succeeded)
	r.fig("failing", v.failing)
	r.fig("ledger_rows", v.ledger)
	r.fig("failing_applied", v.appliedFailing)
	if checkWF {
		r.fig("workflows", v.workflows)
		r.fig("missing_workflows", v.missingWF)
		r.fig("unexpected_workflows", v.unexpectedWF)
	}
	if checkDLQ {
		r.fig("dlq_records", v.dlq)
		r.fig("dlq_duplicates", v.dlqDup)
		r.fig("dlq_missing", v.dlqMissing)
		r.fig("dlq_unexpected", v.dlqUnexpect)
	}
	require.Zero(t, v.lost, "lost events, e.g. %v", v.examplesLost)
	require.Zero(t, v.doubleApplied, "double-applied events, e.g. %v", v.examplesDouble)
	require.Zero(t, v.appliedFailing, "failing events have no effect")
	require.Equal(t, v.succeeded, v.ledger, "one ledger row per successful event")
	if checkWF {
		require.Zero(t, v.dupWorkflows, "duplicate workflow runs")
		require.Zero(t, v.missingWF, "failing events without a workflow")
		require.Zero(t, v.unexpectedWF, "workflows for events that did not fail")
	}
	if checkDLQ {
		require.Zero(t, v.dlqDup, "DLQ records twice")
		require.Zero(t, v.dlqMissing, "failing events missing from the DLQ, e.g. %v", v.exDLQMiss)
		require.Zero(t, v.dlqUnexpect, "DLQ records of events that should not be there")
	}
}

// waitDLQCount waits until the DLQ topic holds at least n records.
func (s *stack) waitDLQCount(n int64, within time.Duration) int64 {
	deadline := time.Now().Add(within)
	var got int64
	for time.Now().Before(deadline) {
		got = 0
		for _, e := range s.endOffsets(s.dlqTopic) {
			got += e
		}
		if got >= n {
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
	return got
}

func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}
