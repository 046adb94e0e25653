package bench

// Setting up what the phases share: the bench tables and projection, the
// PostgreSQL, Temporal and Kafka clients, the in-process worker, and the
// environment of the bridge children.

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/projection"
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
-- The dedupe ledger's row, as one hour partition holds it.
CREATE TABLE IF NOT EXISTS bench_ledger (
    key        uuid NOT NULL,
    bucket     int  NOT NULL,
    projection text NOT NULL,
    ir_version int  NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, bucket)
);
TRUNCATE bench_rows, bench_ceiling, bench_ledger;`

// setup opens the service the way `causet worker` does (package app): the
// pool, with the bench tables and projection deployed before the engine
// reads the catalog, the engine, and the Temporal client (the stack's dev
// server, or TEMPORAL_* via envconfig). Its worker (startWorker) polls
// workQueue and dead-letters to dlqTopic.
func (b *bench) setup(ctx context.Context, stack *devstack.Stack) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	cfg.DatabaseURL, cfg.KafkaBrokers = b.dbURL, b.brokers
	// A secured broker (KAFKA_TLS, KAFKA_SASL_*): the bench's own clients
	// connect as the processes do; its bridge children read the same
	// environment.
	if b.kafkaOpts, err = app.KafkaConnOpts(cfg.KafkaSecurity, cfg.LinkTimeout); err != nil {
		return err
	}
	cfg.DLQTopic, cfg.TaskQueue = b.dlqTopic, b.workQueue
	cfg.AutoMigrate = true // the bench's own database, or one it may prepare
	opts := []app.Option{app.WithLogger(b.log), app.WithSetup(b.setupTables)}
	if stack.Temporal != nil {
		opts = append(opts, app.WithTemporalAddress(stack.Temporal.HostPort))
		b.temporalAddr = stack.Temporal.HostPort
	}
	if b.svc, err = app.Open(ctx, cfg, opts...); err != nil {
		return err
	}
	if stack.Temporal != nil {
		b.res.Machine.Temporal = "dev server (in memory), " + stack.Temporal.CLI
	} else {
		b.res.Machine.Temporal = "TEMPORAL_ADDRESS " + b.svc.Temporal.HostPort
	}
	if b.prod, err = kgo.NewClient(append(b.kafka(), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20), kgo.AllowAutoTopicCreation())...); err != nil {
		return err
	}
	return devstack.EnsureTopicsWith(ctx, b.kafka(), int32(b.sizes.Partitions), b.dlqTopic)
}

// setupTables records the server version, creates the bench tables (empty)
// and deploys the bench projection.
func (b *bench) setupTables(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&b.res.Machine.Postgres); err != nil {
		return err
	}
	_, err := deployBench(ctx, pool)
	return err
}

// deployBench migrates the schema, creates the bench tables (empty) and the bench
// projection in pool's database; it returns the projection's IR version.
func deployBench(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	if _, err := schema.Up(ctx, pool, nil); err != nil {
		return 0, err
	}
	if _, err := pool.Exec(ctx, benchDDL); err != nil {
		return 0, fmt.Errorf("bench tables: %w", err)
	}
	doc, err := projection.Parse([]byte(benchIR))
	if err != nil {
		return 0, err
	}
	return projection.Deploy(ctx, pool, doc)
}

func (b *bench) close() {
	if b.prod != nil {
		b.prod.Close()
	}
	if b.svc != nil {
		b.svc.Close()
	}
}

// startWorker runs the service's worker (on workQueue) until the returned
// stop is called.
func (b *bench) startWorker() (func(), error) {
	w, err := b.svc.NewWorker()
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	return w.Stop, nil
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

// kafka is what a client of the bench's broker needs: its seed brokers and
// the connection options of KAFKA_TLS and KAFKA_SASL_* (none for a
// plaintext broker).
func (b *bench) kafka() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(b.brokers...)}, b.kafkaOpts...)
}
