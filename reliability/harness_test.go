package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// ordering is the bridge's CAUSET_ORDERING for a scenario run.
type ordering string

const (
	// orderingEntity is the default: CAUSET_ORDERING is left unset.
	orderingEntity ordering = "entity"
	orderingNone   ordering = "none"
)

// forOrderings runs scenario once per ordering, as subtests named "entity"
// and "none". The short profile runs only the orderings in short;
// CAUSET_RELIABILITY_ORDERINGS (e.g. "none" or "entity,none") overrides the
// profile's choice.
func forOrderings(t *testing.T, p profile, short []ordering, scenario func(t *testing.T, o ordering)) {
	want := []ordering{orderingEntity, orderingNone}
	if p == profileShort {
		want = short
	}
	if v := strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY_ORDERINGS")); v != "" {
		want = nil
		for _, f := range strings.Split(v, ",") {
			want = append(want, ordering(strings.TrimSpace(f)))
		}
	}
	for _, o := range []ordering{orderingEntity, orderingNone} {
		t.Run(string(o), func(t *testing.T) {
			if !slices.Contains(want, o) {
				t.Skipf("ordering %s is not in this profile (full profile, or CAUSET_RELIABILITY_ORDERINGS=%s)", o, o)
			}
			scenario(t, o)
		})
	}
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
      entity_id: event.entityId
      seq: event.sequence
      ratio: event.payload.one / event.payload.d
    increment:
      n: event.payload.one
`

// relDDL also keeps, per entity, the order in which its events were
// applied, in rel_order: n counts them, last_seq is the highest sequence of
// the latest transaction that wrote one, and inversions counts events
// applied in a later transaction than an event of the entity with a higher
// sequence. Within one transaction the engine writes rows in key order (its
// lock order), which is no inversion: the transaction commits as a whole.
// With entity ordering an entity's events must apply in sequence order.
const relDDL = `
CREATE TABLE rel_effects (event_id text PRIMARY KEY, entity_id text, seq bigint, ratio bigint, n bigint NOT NULL DEFAULT 0);
CREATE TABLE rel_order (entity_id text PRIMARY KEY, n bigint NOT NULL, last_seq bigint NOT NULL, last_tx bigint NOT NULL,
  before_seq bigint NOT NULL, inversions bigint NOT NULL DEFAULT 0);
CREATE FUNCTION rel_order_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- before_seq: the highest sequence applied by earlier transactions.
  INSERT INTO rel_order AS o (entity_id, n, last_seq, last_tx, before_seq)
  VALUES (NEW.entity_id, 1, NEW.seq, txid_current(), -1)
  ON CONFLICT (entity_id) DO UPDATE SET
    n = o.n + 1,
    last_tx = EXCLUDED.last_tx,
    last_seq = CASE WHEN o.last_tx = EXCLUDED.last_tx THEN greatest(o.last_seq, EXCLUDED.last_seq) ELSE EXCLUDED.last_seq END,
    before_seq = CASE WHEN o.last_tx = EXCLUDED.last_tx THEN o.before_seq ELSE greatest(o.before_seq, o.last_seq) END,
    inversions = o.inversions + (EXCLUDED.last_seq <
      CASE WHEN o.last_tx = EXCLUDED.last_tx THEN o.before_seq ELSE greatest(o.before_seq, o.last_seq) END)::int;
  RETURN NULL;
END $$;
CREATE TRIGGER rel_order AFTER INSERT ON rel_effects FOR EACH ROW EXECUTE FUNCTION rel_order_fn();
`

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
	ordering   ordering
	srv        *testenv.TemporalServer // nil when the scenario runs its own Temporal
	// env overrides for every process started from this stack.
	env map[string]string
}

type stackOptions struct {
	partitions int32
	// ordering of the bridges; "" is the default (entity).
	ordering ordering
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
	if o.ordering == "" {
		o.ordering = orderingEntity
	}
	s := &stack{t: t, ctx: ctx, bin: causetBin(t), dir: dir, partitions: o.partitions, ordering: o.ordering,
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
		s.temporal, s.namespace, s.tc, s.srv = srv.HostPort, srv.Namespace, srv.Client, &srv
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

// procEnv is the environment of a causet subprocess of this stack. In the
// entity ordering CAUSET_ORDERING is left unset, so the default is what runs.
func (s *stack) procEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAUSET_ORDERING=") {
			env = append(env, kv)
		}
	}
	base := map[string]string{
		"DATABASE_URL":                       s.dbURL,
		"KAFKA_BROKERS":                      strings.Join(s.brokers, ","),
		"CAUSET_EVENTS_TOPIC":                s.topic,
		"CAUSET_DLQ_TOPIC":                   s.dlqTopic,
		"CAUSET_CONSUMER_GROUP":              s.group,
		"CAUSET_TASK_QUEUE":                  s.taskQueue,
		"CAUSET_BRIDGE_MODE":                 "inline",
		"TEMPORAL_ADDRESS":                   s.temporal,
		"TEMPORAL_NAMESPACE":                 s.namespace,
		"PROJECTION_WORKER_MAX_RETRIES":      "5",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "2",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "30000",
	}
	if s.ordering == orderingNone {
		base["CAUSET_ORDERING"] = "none"
	}
	for k, v := range s.env {
		base[k] = v
	}
	for k, v := range extra {
		base[k] = v
	}
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

// shortSchedule makes failing events dead-letter within ~4 s: attempts at
// 0, 1, 2, 3, 4 s (Temporal keeps no delay under 1 s, so none is shorter).
var shortSchedule = map[string]string{
	"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
	"PROJECTION_WORKER_RETRY_MULTIPLIER": "1",
	"PROJECTION_WORKER_RETRY_MAX_MS":     "1000",
}

// ---------------------------------------------------------------- processes

// proc is a causet subprocess.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	metrics string // host:port of its /metrics
	done    chan struct{}
	err     error
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
	p := &proc{name: name, log: filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, n)), done: make(chan struct{}),
		metrics: "127.0.0.1:" + strconv.Itoa(freePort(s.t))}
	f, err := os.Create(p.log)
	require.NoError(s.t, err)
	withMetrics := map[string]string{"CAUSET_METRICS_ADDR": p.metrics}
	for k, v := range extra {
		withMetrics[k] = v
	}
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = s.procEnv(withMetrics)
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

// logEvents returns the process' JSON log lines whose "event" is ev.
func (p *proc) logEvents(ev string) []map[string]any {
	b, _ := os.ReadFile(p.log)
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"`+ev+`"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["event"] == ev {
			out = append(out, m)
		}
	}
	return out
}

// metric sums the samples of a Prometheus metric on the process' /metrics
// (-1 when it cannot be read).
func (p *proc) metric(name string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// ---------------------------------------------------------------- events

// evt is one produced event and where it landed.
type evt struct {
	id        string
	entity    string
	seq       int64 // the envelope's sequence; grows with production order
	fails     bool  // payload.d = 0: fails every attempt
	partition int32
	offset    int64
}

// entities is how many entities the generated stream spreads over. All of
// an entity's events go to one partition, keyed by the entity, as a
// producer keyed by entity would send them.
const entities = 997

// mix describes a generated stream. Event i has sequence i and is a failing
// "head" when i%every == every/2; the follow events after a head are of its
// entity, so that with entity ordering they wait in the key's lane behind
// it; in every laneFails-th group the second follower fails too (a failure
// inside a lane). The other events are of entity i%entities: a head's
// entity also sees events long after it, once its key may be unblocked.
type mix struct {
	every, follow, laneFails int
}

// twoPercent is the stream of most scenarios: 2 % heads, each followed by
// three events of its entity, and one failing follower per ten heads.
var twoPercent = mix{every: 50, follow: 3, laneFails: 10}

func (m mix) head(i int) bool { return m.every > 0 && i%m.every == m.every/2 }

// group returns the head whose followers i belongs to (i itself if it is
// one), or -1.
func (m mix) group(i int) int {
	for j := i; j >= 0 && j >= i-m.follow; j-- {
		if m.head(j) {
			return j
		}
	}
	return -1
}

func (m mix) fails(i int) bool {
	if m.head(i) {
		return true
	}
	g := m.group(i)
	return g >= 0 && m.laneFails > 0 && m.follow >= 2 && i == g+2 && (g/m.every)%m.laneFails == 0
}

func (m mix) entity(i int) int {
	if g := m.group(i); g >= 0 {
		return g % entities
	}
	return i % entities
}

// succeeding counts the events of [0, n) that do not fail.
func (m mix) succeeding(n int) int {
	c := 0
	for i := 0; i < n; i++ {
		if !m.fails(i) {
			c++
		}
	}
	return c
}

// relEvt is event i of the stream m.
func (s *stack) relEvt(i int, m mix) evt {
	ent := m.entity(i)
	return evt{id: fmt.Sprintf("%s-%d", s.prefix, i), entity: fmt.Sprintf("ent-%d", ent), seq: int64(i),
		fails: m.fails(i), partition: int32(ent) % s.partitions}
}

// record is e's record: on e.partition, keyed by its entity.
func (s *stack) record(e evt) *kgo.Record {
	d := 1
	if e.fails {
		d = 0
	}
	v := fmt.Sprintf(`{"eventId":%q,"eventType":"REL_EVENT","entityId":%q,"forkId":"production","sequence":%d,"occurredAt":"2026-12-02T12:00:00Z","payload":{"one":1,"d":%d}}`,
		e.id, e.entity, e.seq, d)
	return &kgo.Record{Partition: e.partition, Key: []byte(e.entity), Value: []byte(v)}
}

// produce produces evs, in order, and records where each landed in into.
func (s *stack) produce(evs []evt, into *eventLog) {
	s.t.Helper()
	recs := make([]*kgo.Record, len(evs))
	index := make(map[*kgo.Record]int, len(evs))
	for k, e := range evs {
		recs[k] = s.record(e)
		index[recs[k]] = k
	}
	res := s.producer.ProduceSync(s.ctx, recs...)
	require.NoError(s.t, res.FirstErr())
	// ProduceSync's results come in completion order, not input order.
	for _, r := range res {
		e := evs[index[r.Record]]
		e.partition, e.offset = r.Record.Partition, r.Record.Offset
		into.add(e)
	}
}

// produceRange produces events [from, to) of the stream m.
func (s *stack) produceRange(from, to int, m mix, into *eventLog) {
	s.t.Helper()
	evs := make([]evt, 0, to-from)
	for i := from; i < to; i++ {
		evs = append(evs, s.relEvt(i, m))
	}
	s.produce(evs, into)
}

// producePaced produces n events of m in batches over about d, in a
// goroutine; the returned channel closes when all are produced.
func (s *stack) producePaced(n int, d time.Duration, m mix, into *eventLog) <-chan struct{} {
	done := make(chan struct{})
	const batch = 250
	batches := (n + batch - 1) / batch
	gap := d / time.Duration(max(batches, 1))
	go func() {
		defer close(done)
		for b := 0; b < batches; b++ {
			from, to := b*batch, min((b+1)*batch, n)
			s.produceRange(from, to, m, into)
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

// workflowsOnQueue lists every run of workflow type typ ("" for any)
// started on the stack's task queue.
func (s *stack) workflowsOnQueue(typ string) []execution {
	s.t.Helper()
	query := fmt.Sprintf("TaskQueue = %q", s.taskQueue)
	if typ != "" {
		query += fmt.Sprintf(" AND WorkflowType = %q", typ)
	}
	var out []execution
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.namespace, Query: query, NextPageToken: token, PageSize: 1000,
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

// laneID is the lane workflow of one entity of rel_effects.
func laneID(entity string) string {
	return workflows.LaneWorkflowID(relProjection, "production", entity)
}

// laneStatus queries a lane's status; false when it cannot (no open run).
func (s *stack) laneStatus(id string) (workflows.LaneStatus, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var st workflows.LaneStatus
	v, err := s.tc.QueryWorkflow(ctx, id, "", workflows.QueryLaneStatus)
	if err != nil || v.Get(&st) != nil {
		return st, false
	}
	return st, true
}

// terminate terminates a workflow's open run as an operator would, with
// `temporal workflow terminate` (through the SDK client when the scenario's
// Temporal has no CLI at hand); it returns how.
func (s *stack) terminate(id, reason string) string {
	s.t.Helper()
	if s.srv != nil {
		_, err := s.srv.CLI("workflow", "terminate", "--workflow-id", id, "--reason", reason)
		if err == nil {
			return "cli"
		}
		if !strings.Contains(err.Error(), "CLI not found") {
			require.NoError(s.t, err)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	require.NoError(s.t, s.tc.TerminateWorkflow(ctx, id, "", reason))
	return "client"
}

// entityOrder is an entity's row of rel_order.
type entityOrder struct{ n, lastSeq, inversions int64 }

func (s *stack) orderOf(entity string) entityOrder {
	s.t.Helper()
	var o entityOrder
	err := s.pool.QueryRow(s.ctx, `SELECT n, last_seq, inversions FROM rel_order WHERE entity_id = $1`, entity).
		Scan(&o.n, &o.lastSeq, &o.inversions)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		require.NoError(s.t, err)
	}
	return o
}

// blockedKeys counts the keys the bridges hold blocked (-1 when unknown).
func (s *stack) blockedKeys() int {
	if s.tryCount(`SELECT count(*) FROM pg_class WHERE relname = 'causet_blocked_keys'`) == 0 {
		return 0
	}
	return s.tryCount(`SELECT count(*) FROM causet_blocked_keys`)
}

// ---------------------------------------------------------------- verdict

// verdict compares the world with the produced events.
type verdict struct {
	ordering                                ordering
	produced, succeeded, failing            int
	lost, doubleApplied, appliedFailing     int
	ledger                                  int
	workflows, dupWorkflows, missingWF      int
	unexpectedWF, laned, lanedEarlier       int
	lanes, laneRuns                         int
	inversions                              int
	dlq, dlqDup, dlqMissing, dlqUnexpect    int
	examplesLost, examplesDouble, exDLQMiss []string
	examplesUnexpected, examplesInversions  []string
}

// verify checks effects, ledger, workflows and DLQ against the events.
// checkWF/checkDLQ turn off the workflow/DLQ parts.
//
// Workflows are counted by ID among the ProjectionRetryWorkflow runs of the
// task queue: a failing event must have exactly one. With entity ordering an
// event of an entity that has a failing event may also have one: it ran in
// the key's lane, as a child. That is normally an event after the failure;
// after a crash it can also be an earlier one, redelivered from the last
// committed offset while its key is already blocked by the later failure
// (it was applied before the crash, so its child finds it in the ledger).
// Any other event must not have one. Lanes are counted apart: a key has a
// lane run each time it is blocked with later events, plus its
// continue-as-new runs.
func (s *stack) verify(events []evt, checkWF, checkDLQ bool) verdict {
	s.t.Helper()
	v := verdict{ordering: s.ordering}
	v.produced = len(events)
	app := s.applied()
	failing := map[string]bool{}
	firstFailure := map[string]int64{} // entity -> sequence of its first failing event
	byWF := map[string]evt{}           // retry workflow ID -> its event
	for _, e := range events {
		byWF[wfID(e.id)] = e
		if e.fails {
			if f, ok := firstFailure[e.entity]; !ok || e.seq < f {
				firstFailure[e.entity] = e.seq
			}
		}
	}
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
	v.inversions = s.countSQL(`SELECT coalesce(sum(inversions), 0)::int FROM rel_order`)
	if v.inversions > 0 {
		rows, err := s.pool.Query(s.ctx, `SELECT entity_id || ':' || inversions FROM rel_order WHERE inversions > 0 ORDER BY inversions DESC LIMIT 5`)
		require.NoError(s.t, err)
		for rows.Next() {
			var x string
			require.NoError(s.t, rows.Scan(&x))
			v.examplesInversions = append(v.examplesInversions, x)
		}
		rows.Close()
	}
	if checkWF {
		runs := map[string]int{}
		for _, e := range s.workflowsOnQueue(workflows.RetryWorkflowName) {
			runs[e.id]++
		}
		v.workflows = len(runs)
		for _, n := range runs {
			if n > 1 {
				v.dupWorkflows += n - 1
			}
		}
		for id := range failing {
			if runs[wfID(id)] == 0 {
				v.missingWF++
			}
		}
		for id := range runs {
			e, known := byWF[id]
			switch {
			case known && e.fails:
			case known && s.ordering == orderingEntity && entityFailed(firstFailure, e):
				v.laned++
				if !hasFailedBefore(firstFailure, e) {
					v.lanedEarlier++
				}
			default:
				v.unexpectedWF++
				if len(v.examplesUnexpected) < 5 {
					v.examplesUnexpected = append(v.examplesUnexpected, id)
				}
			}
		}
		lanes := map[string]bool{}
		for _, e := range s.workflowsOnQueue(workflows.LaneWorkflowName) {
			lanes[e.id] = true
			v.laneRuns++
		}
		v.lanes = len(lanes)
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

func entityFailed(firstFailure map[string]int64, e evt) bool {
	_, ok := firstFailure[e.entity]
	return ok
}

func hasFailedBefore(firstFailure map[string]int64, e evt) bool {
	f, ok := firstFailure[e.entity]
	return ok && f < e.seq
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
	r.fig("order_inversions", v.inversions)
	if checkWF {
		r.fig("workflows", v.workflows)
		r.fig("missing_workflows", v.missingWF)
		r.fig("unexpected_workflows", v.unexpectedWF)
		r.fig("laned_events", v.laned)
		r.fig("laned_redelivered_before_failure", v.lanedEarlier)
		r.fig("lanes", v.lanes)
		r.fig("lane_runs", v.laneRuns)
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
	if v.ordering == orderingEntity {
		require.Zero(t, v.inversions, "an entity's events applied out of sequence order (entity:inversions) %v", v.examplesInversions)
	}
	if checkWF {
		require.Zero(t, v.dupWorkflows, "duplicate workflow runs")
		require.Zero(t, v.missingWF, "failing events without a workflow")
		require.Zero(t, v.unexpectedWF, "workflows for events that did not fail (nor followed a failure of their entity), e.g. %v", v.examplesUnexpected)
	}
	if checkDLQ {
		require.Zero(t, v.dlqDup, "DLQ records twice")
		require.Zero(t, v.dlqMissing, "failing events missing from the DLQ, e.g. %v", v.exDLQMiss)
		require.Zero(t, v.dlqUnexpect, "DLQ records of events that should not be there")
	}
}

// progress describes where a scenario stands, for a failure message: each
// partition's committed and end offsets, the rows applied, the blocked keys
// and the open retry and lane workflows.
func (s *stack) progress() string {
	ends := s.endOffsets(s.topic)
	c := s.committed()
	var parts []string
	for p := int32(0); p < s.partitions; p++ {
		parts = append(parts, fmt.Sprintf("p%d=%d/%d", p, c[p], ends[p]))
	}
	open := func(typ string) int {
		n := 0
		for _, e := range s.workflowsOnQueue(typ) {
			if e.status == "Running" {
				n++
			}
		}
		return n
	}
	return fmt.Sprintf("committed %s; rows %d; blocked keys %d; open retry workflows %d; open lanes %d",
		strings.Join(parts, " "), s.tryCount(`SELECT count(*) FROM rel_effects`), s.blockedKeys(),
		open(workflows.RetryWorkflowName), open(workflows.LaneWorkflowName))
}

// waitApplied waits until every succeeding event of evs has its row: with
// entity ordering the events in a lane apply only after their key's head
// settled, possibly after the last DLQ record landed.
func (s *stack) waitApplied(evs []evt, within time.Duration) {
	want := 0
	for _, e := range evs {
		if !e.fails {
			want++
		}
	}
	deadline := time.Now().Add(within)
	for s.tryCount(`SELECT count(*) FROM rel_effects`) < want && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
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
