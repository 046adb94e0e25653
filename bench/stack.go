package bench

// Setting up what the phases share: the bench tables and projection, the
// PostgreSQL, Temporal and Kafka clients, the in-process worker, and the
// environment of the bridge children.

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/worker"
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

// retryEnv is the environment that sets a bridge child's retry schedule to r.
func retryEnv(r config.Retry) map[string]string {
	return map[string]string{
		"PROJECTION_WORKER_MAX_RETRIES":      strconv.Itoa(r.MaxAttempts),
		"PROJECTION_WORKER_RETRY_INITIAL_MS": strconv.FormatInt(r.Initial.Milliseconds(), 10),
		"PROJECTION_WORKER_RETRY_MULTIPLIER": strconv.FormatFloat(r.Multiplier, 'g', -1, 64),
		"PROJECTION_WORKER_RETRY_MAX_MS":     strconv.FormatInt(r.Max.Milliseconds(), 10),
	}
}

// phaseEnv is the environment of a phase's bridge child: it consumes topic
// with a consumer group of its own and starts its retry workflows on
// taskQueue; extra is added on top.
func phaseEnv(topic, taskQueue string, extra map[string]string) map[string]string {
	env := map[string]string{
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_CONSUMER_GROUP": topic + "-g", "CAUSET_TASK_QUEUE": taskQueue,
	}
	maps.Copy(env, extra)
	return env
}
