package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

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
	t         *testing.T
	ctx       context.Context
	bin       string
	dir       string
	pool      *pgxpool.Pool
	dbURL     string
	brokers   []string
	topic     string
	dlqTopic  string
	group     string
	taskQueue string
	// temporal is the scenario's Temporal: testenv's, or its own (then
	// without the CLI).
	temporal   testenv.TemporalServer
	prefix     string
	producer   *kgo.Client
	partitions int32
	ordering   ordering
	// breaks, when set, are the times rel_effects was broken (verify
	// accepts what a break may leave).
	breaks *tableBreaks
	// replay, when set, is the operator's replay of the breaks' dead
	// letters (verify holds each event it selected to applied or refused).
	replay *dlqReplay
	// aside are events a scenario produced beside the stream and checks
	// itself (their runs and dead letters are neither expected nor
	// unexpected to verify).
	aside map[string]bool
	// lostAttempts, when set, makes a dead letter of a succeeding event
	// whose last attempt was lost with its worker an outcome, as a
	// break's: a worker of the release before the lost-attempt rule
	// (CHANGELOG, 0.2.0) dead-letters such an event; the operator's replay
	// then holds it to applied or refused.
	lostAttempts bool
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
	// namespace on that frontend; when empty, default.
	namespace string
	// topicConfig for the events and DLQ topics (e.g. max.message.bytes).
	topicConfig map[string]*string
	// producerOpts are extra options for the test's producer.
	producerOpts []kgo.Opt
	// migrateWith, when set, is the causet binary whose `migrate up`
	// creates the schema, on an empty database (a previous release's);
	// else the database is at this build's schema.
	migrateWith string
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

	var pool *pgxpool.Pool
	if o.migrateWith == "" {
		pool = testenv.Postgres(t)
	} else {
		pool = testenv.EmptyPostgres(t)
	}
	s.pool, s.dbURL = pool, pool.Config().ConnString()
	if o.migrateWith != "" {
		cmd := exec.Command(o.migrateWith, "migrate", "up")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+s.dbURL)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s migrate up: %s", o.migrateWith, out)
	}
	_, err := pool.Exec(ctx, relDDL)
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
	testenv.CreateTopicWithConfig(t, s.brokers, s.topic, o.partitions, o.topicConfig)
	testenv.CreateTopicWithConfig(t, s.brokers, s.dlqTopic, 1, o.topicConfig)

	if o.temporal == "" {
		s.temporal = testenv.Temporal(t)
	} else {
		s.temporal = dialTemporal(t, o.temporal, o.namespace)
	}
	s.taskQueue = testenv.TaskQueue(t)

	popts := append([]kgo.Opt{kgo.SeedBrokers(s.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(s.topic)}, o.producerOpts...)
	s.producer, err = kgo.NewClient(popts...)
	require.NoError(t, err)
	t.Cleanup(s.producer.Close)
	return s
}

// dialTemporal connects to a Temporal frontend of the scenario's own, as
// the bridge and the worker do (package app), in namespace (default when
// empty).
func dialTemporal(t *testing.T, hostPort, namespace string) testenv.TemporalServer {
	t.Helper()
	if namespace != "" {
		c, err := client.DialContext(context.Background(), client.Options{HostPort: hostPort, Namespace: namespace, Logger: quietLogger()})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return testenv.TemporalServerAt(hostPort, namespace, c)
	}
	tc, err := app.DialTemporal(context.Background(), quietSlog(), app.TemporalOptions{HostPort: hostPort})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	return testenv.TemporalServerAt(tc.HostPort, tc.Namespace, tc.Client)
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
		"TEMPORAL_ADDRESS":                   s.temporal.HostPort,
		"TEMPORAL_NAMESPACE":                 s.temporal.Namespace,
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
