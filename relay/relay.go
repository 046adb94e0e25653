package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/backoff"
)

// LockKey is the advisory lock key held by the one publishing relay of a
// database ("causetrl" in ASCII).
const LockKey int64 = 0x63617573_6574726c

// The producer's own retries, below the relay's batch retries.
const (
	// ProducerRecordRetries is how often a record is tried before its batch
	// fails and the relay's backoff takes over (kgo.RecordRetries).
	ProducerRecordRetries = 5
	// ProducerRequestTimeout is how long a broker may take to answer one
	// produce request (kgo.ProduceRequestTimeout).
	ProducerRequestTimeout = 10 * time.Second
)

// ProducerBackoff is the producer's wait before its n-th retry
// (kgo.RetryBackoffFn): 100ms doubling to 1s, ±20% jitter. Five tries
// span about 2.5s, then the relay's backoff governs.
func ProducerBackoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(max(n-1, 0), 4)
	return backoff.Jitter(min(d, time.Second))
}

// dbTimeout bounds one statement of the relay.
const dbTimeout = 30 * time.Second

// StaleLockAfter is how long the lock holder's session may sit idle before
// a relay waiting for the lock ends it (pg_terminate_backend). A live relay
// uses its session at every poll and after every batch, and a batch waits
// for Kafka at most about ProducerRecordRetries × ProducerRequestTimeout
// (50 s). A session idle longer is a relay cut off behind a silent link (a
// hung pooler or proxy keeps the server side open, and with it the lock,
// for good), or, in a long Kafka outage, a live relay, which connects
// again and waits its turn: events it sent but did not mark are sent again
// (the same bytes), never lost.
const StaleLockAfter = 60 * time.Second

// Options configure a Relay.
type Options struct {
	// Pool is the ledger's database. Required. The relay opens one
	// connection of its own with the pool's settings, for the lock and the
	// batches; the pool serves the lag metrics.
	Pool *pgxpool.Pool
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// KafkaOptions are added last to the producer's options (TLS, SASL,
	// logger, hooks). Optional.
	KafkaOptions []kgo.Opt
	// Topic is the events topic (CAUSET_EVENTS_TOPIC). Optional, defaults
	// to config.DefaultEventsTopic.
	Topic string
	// Batch bounds the rows read and produced at once
	// (CAUSET_RELAY_BATCH). Optional, defaults to DefaultBatch; at most
	// MaxBatch.
	Batch int
	// PollInterval is the wait after a batch that was not full
	// (CAUSET_RELAY_POLL_INTERVAL). Optional, defaults to
	// DefaultPollInterval.
	PollInterval time.Duration
	// LockRetry is how often a relay that does not hold the lock tries
	// again. Optional, defaults to 1s.
	LockRetry time.Duration
	// MinBackoff and MaxBackoff bound the capped exponential backoff after a
	// batch Kafka did not acknowledge or a database error. Optional, default
	// to 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// ShutdownGrace is how long Run, once its context is done, waits for
	// records already sent to be answered before it closes the producer
	// (which fails them). Optional, defaults to 5s.
	ShutdownGrace time.Duration
	// Logger receives the relay's logs. Optional, defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the relay's metrics. Optional, defaults to none
	// (counted, not registered).
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() {
	if o.Topic == "" {
		o.Topic = config.DefaultEventsTopic
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.LockRetry == 0 {
		o.LockRetry = time.Second
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = backoff.DefaultMin
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = backoff.DefaultMax
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *Options) validate() error {
	switch {
	case o.Pool == nil:
		return errors.New("relay: Options.Pool is required")
	case len(o.Brokers) == 0:
		return errors.New("relay: Options.Brokers is required")
	case o.Batch < 1 || o.Batch > MaxBatch:
		return fmt.Errorf("relay: Options.Batch is %d: want 1 to %d", o.Batch, MaxBatch)
	case o.PollInterval < 0 || o.LockRetry < 0 || o.ShutdownGrace < 0:
		return errors.New("relay: Options.PollInterval, LockRetry and ShutdownGrace must not be negative")
	case o.MinBackoff < 0 || o.MaxBackoff < o.MinBackoff:
		return fmt.Errorf("relay: Options.MinBackoff %s and MaxBackoff %s: want 0 <= MinBackoff <= MaxBackoff", o.MinBackoff, o.MaxBackoff)
	}
	return nil
}

// Relay publishes the ledger's unpublished events. Build it with New and run
// it with Run.
type Relay struct {
	opts Options
	log  *slog.Logger
	m    *metrics
	cl   *kgo.Client

	closeOnce sync.Once
	ran       atomic.Bool
}

// New validates opts, applies defaults, registers the metrics and builds the
// producer (it connects on first use).
func New(opts Options) (*Relay, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Logger.With("component", "relay")
	m, err := newMetrics(opts.Registerer, opts.Pool, log)
	if err != nil {
		return nil, fmt.Errorf("relay: register metrics: %w", err)
	}
	kopts := append([]kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.DefaultProduceTopic(opts.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(ProducerRecordRetries),
		kgo.RetryBackoffFn(ProducerBackoff),
		kgo.ProduceRequestTimeout(ProducerRequestTimeout),
		// A batch is buffered whole and then flushed: a partition batch
		// Kafka refuses fails every record of the partition still
		// buffered, so no later row of an entity is sent before an
		// earlier one refused with that batch (see produce).
		kgo.ManualFlushing(),
		kgo.MaxBufferedRecords(MaxBatch),
	}, opts.KafkaOptions...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("relay: kafka client: %w", err)
	}
	return &Relay{opts: opts, log: log, m: m, cl: cl}, nil
}

// Run publishes until ctx is done, then marks what Kafka acknowledged,
// closes the producer and returns nil. Database and Kafka failures are
// retried, never returned. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	defer r.closeProducer()
	r.log.Info("relay started", "topic", r.opts.Topic, "batch", r.opts.Batch, "pollInterval", r.opts.PollInterval.String())
	bo := r.newBackoff()
	for ctx.Err() == nil {
		conn, err := r.lock(ctx)
		if err == nil {
			err = r.publish(ctx, conn, bo)
			release(conn)
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		// WARN when a failure follows work, DEBUG while failures repeat.
		level := slog.LevelWarn
		if bo.Waited() {
			level = slog.LevelDebug
		}
		r.log.Log(ctx, level, "relay database error, reconnecting with backoff", "error", err.Error())
		if bo.Wait(ctx) != nil {
			break
		}
	}
	r.log.Info("relay stopped")
	return nil
}

// lock opens the relay's connection and returns it once it holds LockKey,
// trying every LockRetry while another session holds it.
func (r *Relay) lock(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, r.opts.Pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	for waited := false; ; waited = true {
		qctx, cancel := context.WithTimeout(ctx, dbTimeout)
		var held bool
		err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", LockKey).Scan(&held)
		cancel()
		if err != nil {
			release(conn)
			return nil, fmt.Errorf("take the relay lock: %w", err)
		}
		if held {
			r.log.Info("relay holds the lock, publishing", "lockKey", LockKey)
			return conn, nil
		}
		if idle, err := endStaleHolder(ctx, conn); err != nil {
			release(conn)
			return nil, fmt.Errorf("look for a stale holder of the relay lock: %w", err)
		} else if idle > 0 {
			r.log.Warn("ended the session holding the relay lock: idle too long for a live relay (one cut off behind a silent link)",
				"lockKey", LockKey, "idle", idle.Round(time.Second).String(), "staleAfter", StaleLockAfter.String())
			continue
		}
		if !waited {
			r.log.Info("another relay holds the lock, waiting", "lockKey", LockKey, "retry", r.opts.LockRetry.String())
		}
		if backoff.Sleep(ctx, r.opts.LockRetry) != nil {
			release(conn)
			return nil, ctx.Err()
		}
	}
}

// endStaleHolder ends the session of this role that holds LockKey when it
// has been idle (between statements, or in a transaction) for
// StaleLockAfter, and returns how long it had been; 0 when there is none.
// pg_locks shows a bigint advisory key as its high (classid) and low
// (objid) 32 bits.
func endStaleHolder(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var idle float64
	err := conn.QueryRow(ctx, `
		SELECT coalesce(max(extract(epoch FROM now() - a.state_change)) FILTER (WHERE pg_terminate_backend(a.pid)), 0)
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid::bigint = ($1::bigint >> 32) AND l.objid::bigint = ($1::bigint & 4294967295)
		  AND a.pid <> pg_backend_pid() AND a.usename = current_user
		  AND a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
		  AND a.state_change < now() - make_interval(secs => $2)`,
		LockKey, StaleLockAfter.Seconds()).Scan(&idle)
	return time.Duration(idle * float64(time.Second)), err
}

// release ends the session, which releases the lock.
func release(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// publish runs batches on conn until ctx is done (nil) or the database
// fails (the error; the lock may be gone with the connection).
func (r *Relay) publish(ctx context.Context, conn *pgx.Conn, bo *backoff.Backoff) error {
	var failingSince time.Time
	for ctx.Err() == nil {
		rows, err := r.fetch(ctx, conn)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read unpublished events: %w", err)
		}
		if len(rows) == 0 {
			bo.Reset()
			_ = backoff.Sleep(ctx, r.opts.PollInterval)
			continue
		}
		errs := r.produce(ctx, rows)
		poison := r.judgeAlone(ctx, rows, errs)
		if err := r.setAside(ctx, conn, rows, errs, poison); err != nil {
			return fmt.Errorf("set aside %d events Kafka refuses: %w", len(poison), err)
		}
		// Rows Kafka acknowledged are marked whatever happened to the
		// others, and never sent again; a row set aside counts as done.
		done := make([]bool, len(rows))
		var perr error
		for i, err := range errs {
			done[i] = err == nil || slices.Contains(poison, i)
			if !done[i] && perr == nil {
				perr = err
			}
		}
		positions := ackedPrefix(rows, done)
		if len(poison) > 0 {
			positions = slices.DeleteFunc(positions, func(p int64) bool {
				return slices.ContainsFunc(poison, func(i int) bool { return rows[i].position == p })
			})
		}
		if err := r.mark(ctx, conn, positions); err != nil {
			return fmt.Errorf("mark %d events published (they will be sent again): %w", len(positions), err)
		}
		r.m.published.Add(float64(len(positions)))
		if perr == nil {
			bo.Reset()
			if !failingSince.IsZero() {
				r.log.Info("kafka acknowledges batches again", "failingFor", time.Since(failingSince).Round(time.Millisecond).String())
				failingSince = time.Time{}
			}
			if len(rows) < r.opts.Batch {
				_ = backoff.Sleep(ctx, r.opts.PollInterval)
			}
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		r.m.failures.Inc()
		attrs := []any{"events", len(rows), "published", len(positions), "firstPosition", rows[0].position, "error", perr.Error()}
		if failingSince.IsZero() {
			failingSince = time.Now()
			r.log.Warn("kafka did not acknowledge the whole batch, sending the rest again with backoff", attrs...)
		} else {
			r.log.Debug("kafka did not acknowledge the batch: still failing", attrs...)
		}
		if bo.Wait(ctx) != nil {
			return nil
		}
	}
	return nil
}

func (r *Relay) closeProducer() { r.closeOnce.Do(r.cl.Close) }

func (r *Relay) newBackoff() *backoff.Backoff {
	return &backoff.Backoff{Min: r.opts.MinBackoff, Max: r.opts.MaxBackoff}
}
