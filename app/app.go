package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/dialer"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/tracing"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
	"github.com/causet/projection-retry/worker"
)

// Service is what the long-running commands share. Open fills every field
// (WithWritePathOnly: all but Engine and Temporal); Close releases them.
type Service struct {
	// Config is the configuration Open was given.
	Config config.Config
	// Logger is the process's logger (WithLogger; slog.Default() without).
	Logger *slog.Logger
	// Registry holds the Go and process collectors, the Temporal SDK's
	// metrics and whatever the worker and the bridge register.
	Registry *prometheus.Registry
	// Pool is the one pgx pool of the process, on DATABASE_URL.
	Pool *pgxpool.Pool
	// Engine is the projection engine on Pool (nil WithWritePathOnly).
	Engine *projection.Engine
	// Temporal is the connected client, with its namespace (nil
	// WithWritePathOnly).
	Temporal *Temporal

	dlq     *kgo.Client
	tracing *tracing.Tracing
	closers []func()
	// health answers /healthz and /readyz on the metrics server: PostgreSQL,
	// Temporal when opened, the bridge's group membership once built.
	health *health.Health
	group  *groupMembership
}

// Option adjusts Open.
type Option func(*options)

type options struct {
	logger        *slog.Logger
	hostPort      string
	setup         func(context.Context, *pgxpool.Pool) error
	writePathOnly bool
	readOnly      bool
	tracing       *tracing.Tracing
	tracingSet    bool
}

// WithLogger is the logger of the service, the Temporal SDK and the Kafka
// clients.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTracing traces the service's Kafka clients and Temporal client with t
// (nil: off) instead of the process's tracing.Default().
func WithTracing(t *tracing.Tracing) Option {
	return func(o *options) { o.tracing, o.tracingSet = t, true }
}

// WithTemporalAddress dials this Temporal frontend (host:port) in namespace
// "default" instead of reading TEMPORAL_*: for a dev server started by the
// process itself (causet dev).
func WithTemporalAddress(hostPort string) Option {
	return func(o *options) { o.hostPort = hostPort }
}

// WithSetup runs setup on the pool once it is open, before the projection
// engine reads the catalog (causet dev deploys its example projections so).
func WithSetup(setup func(context.Context, *pgxpool.Pool) error) Option {
	return func(o *options) { o.setup = setup }
}

// Open builds the service from cfg: it requires DATABASE_URL, opens the pool,
// checks the database's schema version (schema.Check: an older one is
// migrated only with CAUSET_AUTO_MIGRATE, a newer one refused), opens the
// projection engine, maintains the dedupe ledger (in the background, now and every
// DedupeMaintainEvery until Close), dials Temporal and adds the search attributes
// the workflows use where the server allows it (WithWritePathOnly: the pool
// only). On error what was opened is closed again.
func Open(ctx context.Context, cfg config.Config, opts ...Option) (_ *Service, err error) {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.tracingSet {
		o.tracing = tracing.Default()
	}
	s := &Service{Config: cfg, Logger: o.logger, health: health.New(health.DefaultTimeout), tracing: o.tracing}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := cfg.RequireDatabaseURL(); err != nil {
		return nil, err
	}
	s.Registry = prometheus.NewRegistry()
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.Pool, err = OpenPool(ctx, cfg.DatabaseURL, cfg.LinkTimeout); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Pool.Close)
	s.health.Add(s.postgresCheck())
	if err := s.pingPool(ctx); err != nil {
		return nil, err
	}
	if err := schema.Check(ctx, s.Pool, cfg.AutoMigrate && !o.readOnly, s.Logger); err != nil {
		return nil, err
	}
	if o.setup != nil {
		if err := o.setup(ctx, s.Pool); err != nil {
			return nil, err
		}
	}
	if o.writePathOnly {
		return s, nil
	}
	if s.Engine, err = projection.NewEngine(ctx, s.Pool, s.Logger, projection.WithCostLimit(cfg.IRCostLimit)); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Engine.Close)
	if !o.readOnly {
		s.startDedupeMaintenance()
	}
	if s.Temporal, err = DialTemporal(ctx, s.Logger, TemporalOptions{HostPort: o.hostPort, Metrics: s.Registry, Tracing: s.tracing}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Temporal.Close)
	s.health.Add(s.temporalCheck())
	if err := refuseOpenLanes(ctx, s.Temporal); err != nil {
		return nil, err
	}
	if o.readOnly {
		return s, nil
	}
	if err := worker.EnsureSearchAttributes(ctx, s.Temporal.Client.OperatorService(), s.Temporal.Namespace); err != nil {
		return nil, err
	}
	return s, nil
}

// WithReadOnly opens the service for commands that only read (`causet
// projections check`): the schema is checked, never migrated, the dedupe
// ledger is not maintained and no search attribute is added.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// Close releases what the service opened, newest first: the DLQ producer,
// the Temporal client, the engine, the pool. It is idempotent.
func (s *Service) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// pingPool checks within 10 s that PostgreSQL answers; the error names the
// host and port, never the URL or the password.
func (s *Service) pingPool(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Pool.Ping(pctx); err != nil {
		return fmt.Errorf("DATABASE_URL: cannot reach %s", s.poolError(err))
	}
	return nil
}

// DefaultStatementTimeout is the statement_timeout of every session a
// causet process opens, unless DATABASE_URL sets one
// (?statement_timeout=…): a statement stuck behind a lock or a slow disk
// fails instead of holding its caller. Migrations run without it.
const DefaultStatementTimeout = "60s"

// DatabaseTryTimeout is how long one database try of the bridge may wait
// for its answer on pool's sessions: their statement_timeout and 5 s, so
// that the server ends a statement that is merely slow first, and a try
// that outlives it waits on a connection that will never answer (a hung
// pooler or proxy, which TCP keepalive and TCP_USER_TIMEOUT do not see). A
// statement_timeout of 0 (none) or one this cannot read gives the default's.
func DatabaseTryTimeout(pool *pgxpool.Pool) time.Duration {
	st, err := statementTimeout(pool.Config().ConnConfig.RuntimeParams["statement_timeout"])
	if err != nil || st <= 0 {
		return starter.DefaultDatabaseTryTimeout
	}
	return st + 5*time.Second
}

// statementTimeout reads a statement_timeout setting: milliseconds when it
// has no unit, else a number and one of PostgreSQL's time units.
func statementTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(ms) * time.Millisecond, nil
	}
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("statement_timeout %q: not a duration", v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("statement_timeout %q: %w", v, err)
	}
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "min": time.Minute,
		"h": time.Hour, "d": 24 * time.Hour}[strings.TrimSpace(v[i:])]
	if unit == 0 {
		return 0, fmt.Errorf("statement_timeout %q: unknown unit", v)
	}
	return time.Duration(n * float64(unit)), nil
}

// PoolPingTimeout bounds the liveness ping of a pooled connection idle for
// a second or more, as it is acquired.
const PoolPingTimeout = 3 * time.Second

// OpenPool builds a pgx pool on url, whose idle connections are checked
// every 10 s so that broken ones are replaced between requests too; errors
// never echo the URL, which may hold a password. Its sessions use
// client_encoding UTF8, as Go strings are, whatever the database's own
// encoding. Every connection is dialed with linkTimeout (package
// internal/dialer: keepalive and TCP_USER_TIMEOUT), takes at most
// dialer.ConnectTimeout to establish unless the URL sets connect_timeout,
// and runs with DefaultStatementTimeout unless the URL sets one.
func OpenPool(ctx context.Context, url string, linkTimeout time.Duration) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL URL")
	}
	pc.HealthCheckPeriod = 10 * time.Second
	pc.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	if _, set := pc.ConnConfig.RuntimeParams["statement_timeout"]; !set {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = DefaultStatementTimeout
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = dialer.ConnectTimeout
	}
	pc.ConnConfig.DialFunc = dialer.New(linkTimeout).DialContext
	// An idle connection is pinged when acquired; on a silent link the ping
	// fails within this, and the pool dials afresh instead of waiting out
	// the caller's deadline.
	pc.PingTimeout = PoolPingTimeout
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}

// ProbePostgres is the bridge's proof of a database outage: a connection of
// its own (the pool's settings), one round trip, closed. It does not queue
// for a pooled connection, so a pool saturated by slow applies is not taken
// for an outage, and it fails within its context on a silent link instead
// of first waiting out a pooled connection that crosses it.
func ProbePostgres(pool *pgxpool.Pool) func(context.Context) error {
	cfg := pool.Config().ConnConfig
	return func(ctx context.Context) error {
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}()
		return conn.Ping(ctx)
	}
}

// NewKafkaClient builds a Kafka client on the configured brokers with their
// TLS and SASL, followed by extra.
func NewKafkaClient(cfg config.Config, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := KafkaOpts(cfg, extra...)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(opts...)
}
