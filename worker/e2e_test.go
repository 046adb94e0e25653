package worker_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/worker"
)

var recordHistories = flag.Bool("record-histories", false, "write the workflow histories of the end-to-end test to ../workflows/testdata")

func TestMain(m *testing.M) { testenv.Main(m) }

func deploy(t *testing.T, ctx context.Context, pool *pgxpool.Pool, doc string) {
	t.Helper()
	d, err := projection.Parse([]byte(doc))
	require.NoError(t, err)
	_, err = projection.Deploy(ctx, pool, d)
	require.NoError(t, err)
}

// workerEnv is a worker on a real Temporal server, PostgreSQL and Kafka,
// with the seed's artist_followers table (it lacks followed_at) and the IR
// document doc deployed; its logs are kept.
type workerEnv struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	srv      testenv.TemporalServer
	brokers  []string
	dlqTopic string
	engine   *projection.Engine
	tq       string
	logs     *testenv.LogBuffer
	// reg holds the worker's SDK metrics, as a worker's /metrics serves them.
	reg *prometheus.Registry
}

// testConsumerGroup is the group the worker's dead letters name.
const testConsumerGroup = "causet-projection-worker"

func newWorkerEnv(t *testing.T, doc string) *workerEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &workerEnv{ctx: ctx, pool: testenv.Postgres(t), srv: testenv.Temporal(t), brokers: testenv.Kafka(t),
		dlqTopic: testenv.Topic(t, "dlq"), tq: testenv.TaskQueue(t), logs: &testenv.LogBuffer{}}
	testenv.CreateTopic(t, e.brokers, e.dlqTopic, 1)
	_, err := e.pool.Exec(ctx, testenv.FollowersNoFollowedAtDDL)
	require.NoError(t, err)
	logger := slog.New(slog.NewJSONHandler(e.logs, nil))
	e.engine, err = projection.NewEngine(ctx, e.pool, logger)
	require.NoError(t, err)
	t.Cleanup(e.engine.Close)
	deploy(t, ctx, e.pool, doc)

	producer, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	// The worker's client logs and counts as a worker's does: workflow
	// log lines into logs, SDK metrics into reg.
	e.reg = prometheus.NewRegistry()
	metrics, closeMetrics, err := worker.MetricsHandler(e.reg, logger)
	require.NoError(t, err)
	t.Cleanup(closeMetrics)
	c, err := client.NewClientFromExisting(e.srv.Client, client.Options{
		Namespace: e.srv.Namespace, Logger: worker.SDKLogger(logger), MetricsHandler: metrics,
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	w, err := worker.New(worker.Options{
		Client:    c,
		TaskQueue: e.tq,
		Activities: &activities.Activities{
			Applier:   e.engine,
			Publisher: &dlq.Publisher{Client: producer, Topic: e.dlqTopic, ConsumerGroup: testConsumerGroup},
			Logger:    logger,
		},
		Incidents: &activities.Incidents{Prober: e.engine, Store: incident.NewStore(e.pool), Client: c},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return e
}

func TestKafkaWorkerEndToEnd(t *testing.T) {
	e := newWorkerEnv(t, testenv.FollowersIR)
	ctx, pool, srv, engine, tq, logs := e.ctx, e.pool, e.srv, e.engine, e.tq, e.logs
	brokers, dlqTopic := e.brokers, e.dlqTopic

	ev := event.Envelope{
		EventID: "ev-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-123", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-9"}`),
	}
	// Attempt 1, as the bridge makes it in inline mode.
	attempt1 := time.Now()
	res, err := engine.Apply(ctx, "artist_followers", ev)
	require.NoError(t, err)
	require.NotNil(t, res.Err)
	require.Equal(t, contract.KindSQL, res.Err.Kind)

	id := contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
	recordTime := time.Now().UTC().Truncate(time.Millisecond)
	in := contract.RetryInput{
		Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeInline,
		Source:       contract.Source{Topic: "causet.events.v1", Partition: 1, Offset: 7, Timestamp: recordTime},
		FirstAttempt: &contract.Attempt{Number: 1, StartedAt: attempt1, ErrorKind: string(res.Err.Kind), Error: res.Err.Error(), IRVersion: res.IRVersion},
		Retry:        config.DefaultRetry(), ReplayWindow: time.Hour,
	}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: tq,
		TypedSearchAttributes: temporalAttrs(ev, "artist_followers"),
	}, contract.RetryWorkflowName, in)
	require.NoError(t, err)

	st := waitState(t, ctx, srv.Client, id, contract.StateDeadLettered, 60*time.Second)
	require.Len(t, st.Attempts, 5)
	schedule := config.DefaultRetry().Plan(config.ModeInline).Offsets
	for k, a := range st.Attempts {
		require.Equal(t, k+1, a.Number)
		off := a.StartedAt.Sub(st.Attempts[0].StartedAt)
		t.Logf("attempt %d at +%.3fs (schedule +%s): %s", a.Number, off.Seconds(), schedule[k], a.Error)
		require.GreaterOrEqual(t, off, schedule[k]-50*time.Millisecond, "attempt %d too early", k+1)
		require.LessOrEqual(t, off, schedule[k]+1500*time.Millisecond, "attempt %d too late", k+1)
		require.Equal(t, "sql", a.ErrorKind)
		require.Contains(t, a.Error, `column "followed_at"`)
		require.Contains(t, a.Error, "does not exist")
	}
	require.NotNil(t, st.DLQ)

	// The DLQ record, with every field of CONTRACT §7.
	rec, headers := readDLQ(t, ctx, brokers, dlqTopic)
	require.Equal(t, 1, rec.SchemaVersion)
	require.NotNil(t, rec.Event)
	var got event.Envelope
	require.NoError(t, json.Unmarshal(*rec.Event, &got))
	require.Equal(t, ev.EventID, got.EventID)
	require.Equal(t, "artist_followers", rec.ProjectionName)
	require.Equal(t, 1, rec.IRVersion)
	require.Equal(t, "production", rec.ForkID)
	require.Contains(t, rec.Error, `column "followed_at"`)
	require.Equal(t, "sql", rec.ErrorKind)
	require.Equal(t, 5, rec.RetryCount)
	require.Len(t, rec.Attempts, 5)
	require.WithinDuration(t, attempt1, rec.FirstFailedAt, time.Millisecond)
	require.False(t, rec.DeadLetteredAt.Before(rec.Attempts[4].StartedAt))
	require.Equal(t, contract.Source{Topic: "causet.events.v1", Partition: 1, Offset: 7, Timestamp: recordTime}, rec.Source)
	require.Equal(t, &dlq.WorkflowRef{Namespace: srv.Namespace, ID: id, RunID: run.GetRunID()}, rec.Workflow)
	// Ours, and Spring Kafka's in Spring's encodings (big-endian int and longs).
	millis := binary.BigEndian.AppendUint64(nil, uint64(recordTime.UnixMilli()))
	require.Equal(t, map[string]string{
		dlq.HeaderProjection: "artist_followers", dlq.HeaderEventType: "ARTIST_FOLLOWED", dlq.HeaderRetryCount: "5",
		dlq.HeaderErrorKind: "sql", dlq.HeaderSourceTopic: "causet.events.v1", dlq.HeaderSourcePartition: "1", dlq.HeaderSourceOffset: "7",
		dlq.HeaderDLTOriginalTopic: "causet.events.v1", dlq.HeaderDLTOriginalPartition: "\x00\x00\x00\x01",
		dlq.HeaderDLTOriginalOffset: "\x00\x00\x00\x00\x00\x00\x00\x07", dlq.HeaderDLTOriginalTimestamp: string(millis),
		dlq.HeaderDLTOriginalConsumerGroup: testConsumerGroup, dlq.HeaderDLTExceptionMessage: rec.Error, dlq.HeaderDLTExceptionFQCN: "sql",
	}, headers)

	// The seed's log lines: attempts 2-4 will be retried, attempt 5 dead-letters.
	retries := logs.Where(t, "event", "projection_retry")
	require.Len(t, retries, 3)
	for i, l := range retries {
		require.Equal(t, "artist_followers", l["projectionName"])
		require.Equal(t, "ARTIST_FOLLOWED", l["eventType"])
		require.Equal(t, "user-123", l["entityId"])
		require.Equal(t, "production", l["forkId"])
		require.EqualValues(t, i+2, l["retryAttempt"])
		require.Equal(t, []string{"2s", "4s", "8s"}[i], l["nextRetryIn"])
		require.Contains(t, l["error"], `column "followed_at"`)
	}
	require.Len(t, logs.Where(t, "event", "projection_dead_lettered"), 1)

	// Operators find it with the CLI query from the README.
	require.Eventually(t, func() bool {
		out, err := srv.CLI("workflow", "list", "--query",
			`CausetRetryState="dead_lettered" AND CausetProjection="artist_followers"`, "-o", "json")
		return err == nil && strings.Contains(out, id)
	}, 20*time.Second, 500*time.Millisecond)
	if *recordHistories {
		writeHistory(t, ctx, srv.Client, id, "dead_lettered.json")
	}

	// Fix the projection, replay by signal, and the row appears.
	deploy(t, ctx, pool, testenv.FollowersFixedIR)
	_, err = srv.CLI("workflow", "signal", "--workflow-id", id, "--name", contract.SignalReplay, "--input", `{"reason":"IR v2 drops followed_at"}`)
	require.NoError(t, err)
	st = waitState(t, ctx, srv.Client, id, contract.StateSucceeded, 30*time.Second)
	require.Equal(t, 1, st.ReplayCount)
	require.Equal(t, 2, st.IRVersion)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-123' AND artist_id = 'artist-9'`).Scan(&n))
	require.Equal(t, 1, n)
	require.Len(t, logs.Where(t, "event", "projection_replayed"), 1)
	require.Eventually(t, func() bool {
		out, err := srv.CLI("workflow", "list", "--query", `WorkflowId="`+id+`" AND CausetRetryState="succeeded"`, "-o", "json")
		return err == nil && strings.Contains(out, id)
	}, 20*time.Second, 500*time.Millisecond)
	if *recordHistories {
		writeHistory(t, ctx, srv.Client, id, "replayed.json")
	}
}

func temporalAttrs(ev event.Envelope, projectionName string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		contract.AttrProjection.ValueSet(projectionName),
		contract.AttrEventType.ValueSet(ev.EventType),
		contract.AttrEntityID.ValueSet(ev.EntityID),
		contract.AttrForkID.ValueSet(ev.ForkID),
		contract.AttrRetryState.ValueSet(string(contract.StateRetrying)),
	)
}

func waitState(t *testing.T, ctx context.Context, c client.Client, id string, want contract.State, within time.Duration) contract.Status {
	t.Helper()
	return testenv.WaitQuery(t, ctx, c, id, contract.QueryStatus, within, func(st contract.Status) bool { return st.State == want })
}

func readDLQ(t *testing.T, ctx context.Context, brokers []string, topic string) (dlq.Record, map[string]string) {
	t.Helper()
	recs := testenv.FirstRecords(t, ctx, brokers, topic, 20*time.Second)
	require.Len(t, recs, 1)
	r, err := dlq.Decode(recs[0].Value)
	require.NoError(t, err)
	h := map[string]string{}
	for _, kv := range recs[0].Headers {
		h[kv.Key] = string(kv.Value)
	}
	require.Equal(t, "user-123", string(recs[0].Key))
	return r, h
}

// writeHistory records workflow id's latest run for the replay tests of
// package workflows.
func writeHistory(t *testing.T, ctx context.Context, c client.Client, id, name string) {
	t.Helper()
	testenv.WriteHistory(t, ctx, c, id, "", filepath.Join("..", "workflows", "testdata", name))
}
