package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/ledger"
	"github.com/causet/projection-retry/relay"
	"github.com/causet/projection-retry/starter"
)

// WithWritePathOnly opens only what the write path needs, the pool and the
// registry: no projection engine, no Temporal client (`causet runtime` and
// `causet relay` run without Temporal). NewRuntime and NewRelay work on such
// a service; NewWorker and NewBridge return an error.
func WithWritePathOnly() Option { return func(o *options) { o.writePathOnly = true } }

// errWritePathOnly is the error of what needs the engine or Temporal on a
// service opened WithWritePathOnly.
var errWritePathOnly = errors.New("app: the service was opened WithWritePathOnly: it has no projection engine and no Temporal client")

// RuntimeOptions adjust NewRuntime.
type RuntimeOptions struct {
	// Addr is where Listen listens: CAUSET_RUNTIME_ADDR as
	// intentapi.AddrFromEnv read it. Empty: intentapi.DefaultAddr.
	Addr string
	// Logger is the server's (its intent_outcome lines and access log).
	// Nil: the service's.
	Logger *slog.Logger
	// Auth are the bearer tokens of the API (intentapi.AuthFromEnv); nil
	// serves it without authentication.
	Auth *intentapi.Tokens
}

// Runtime is the write path's HTTP server (package intentapi) on the service's
// pool: the intent handler catalog, the ledger deciding with it, the server
// answering POST and GET /v1/intents, /healthz, /readyz and /metrics (the
// service's registry, on which it counts).
type Runtime struct {
	// Server is the HTTP server.
	Server *intentapi.Server
	// Catalog holds the deployed intent handlers; Serve refreshes it.
	Catalog *intents.Catalog
	// Ledger records intents and their events.
	Ledger *ledger.Ledger
	// Addr is where Listen listens.
	Addr string

	logger *slog.Logger
}

// NewRuntime loads the deployed intent handlers (their CEL bounded by
// CAUSET_IR_COST_LIMIT) and builds the server. Listen and Serve run it.
func (s *Service) NewRuntime(ctx context.Context, o RuntimeOptions) (*Runtime, error) {
	if o.Addr == "" {
		o.Addr = intentapi.DefaultAddr
	}
	if o.Logger == nil {
		o.Logger = s.Logger
	}
	catalog, err := intents.NewCatalog(ctx, s.Pool, o.Logger, intents.WithCostLimit(s.Config.IRCostLimit))
	if err != nil {
		return nil, err
	}
	l := ledger.New(s.Pool, catalog, ledger.WithLogger(o.Logger))
	srv, err := intentapi.New(intentapi.Options{
		Auth:       o.Auth,
		Catalog:    catalog,
		Ledger:     l,
		Health:     s.health,
		Logger:     o.Logger,
		Registerer: s.Registry,
		Gatherer:   s.Registry,
	})
	if err != nil {
		return nil, err
	}
	return &Runtime{Server: srv, Catalog: catalog, Ledger: l, Addr: o.Addr, logger: o.Logger}, nil
}

// Listen listens on Addr; an error names CAUSET_RUNTIME_ADDR.
func (r *Runtime) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", r.Addr)
	if err != nil {
		return nil, fmt.Errorf("CAUSET_RUNTIME_ADDR=%s: %w", r.Addr, err)
	}
	return ln, nil
}

// Serve serves on ln until ctx ends, then finishes the requests in flight
// (intentapi.Server.Serve), logging "runtime started" and "runtime stopped".
func (r *Runtime) Serve(ctx context.Context, ln net.Listener) error {
	r.logger.Info("runtime started", "addr", ln.Addr().String(), "intentTypes", r.Catalog.IntentTypes())
	if err := r.Server.Serve(ctx, ln); err != nil {
		return err
	}
	r.logger.Info("runtime stopped")
	return nil
}

// Run listens on Addr and serves until ctx ends.
func (r *Runtime) Run(ctx context.Context) error {
	ln, err := r.Listen()
	if err != nil {
		return err
	}
	return r.Serve(ctx, ln)
}

// NewRelay builds the outbox relay (package relay) on the service's pool: it
// publishes the ledger's events to CAUSET_EVENTS_TOPIC on the configured
// brokers with their TLS and SASL, counting on the registry (its own
// metrics and the producer's, causet_relay_kafka_*). settings are
// CAUSET_RELAY_BATCH and CAUSET_RELAY_POLL_INTERVAL (relay.LoadSettings).
// Run it with Run, which closes its producer when it returns.
func (s *Service) NewRelay(settings relay.Settings) (*relay.Relay, error) {
	kopts, err := KafkaConnOpts(s.Config.KafkaSecurity, s.Config.LinkTimeout)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts,
		kgo.WithLogger(starter.KafkaLogger(s.Logger)),
		kgo.WithHooks(kprom.NewMetrics("causet_relay_kafka", kprom.Registerer(s.Registry))),
	)
	// Each published event starts its trace: the records carry traceparent.
	kopts = append(kopts, s.tracing.KafkaOpts("")...)
	return relay.New(relay.Options{
		Pool:         s.Pool,
		Brokers:      s.Config.KafkaBrokers,
		KafkaOptions: kopts,
		Topic:        s.Config.EventsTopic,
		Batch:        settings.Batch,
		PollInterval: settings.PollInterval,
		Logger:       s.Logger,
		Registerer:   s.Registry,
	})
}

// ServeMetrics serves reg as /metrics on addr (CAUSET_METRICS_ADDR, which an
// error names), with /healthz and /readyz of checks (package health), until the
// returned stop; a server that fails later is logged on logger.
func ServeMetrics(addr string, reg prometheus.Gatherer, logger *slog.Logger, checks ...health.Check) (stop func(), err error) {
	return serveMetrics(addr, reg, logger, health.New(health.DefaultTimeout, checks...))
}

func serveMetrics(addr string, reg prometheus.Gatherer, logger *slog.Logger, h *health.Health) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CAUSET_METRICS_ADDR=%s: %w", addr, err)
	}
	return serveMetricsOn(ln, reg, logger, h), nil
}

func serveMetricsOn(ln net.Listener, reg prometheus.Gatherer, logger *slog.Logger, h *health.Health) (stop func()) {
	if logger == nil {
		logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h.Register(mux)
	srv := metricsTimeouts.server(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close() }
}

// serverTimeouts bound how long a client on a silent link holds one of an
// HTTP server's connections: until its request's headers are read (header),
// its whole request is read (read), its answer is written (write, from the
// end of the headers), or, between requests, while it is idle (idle).
type serverTimeouts struct{ header, read, write, idle time.Duration }

// metricsTimeouts are the metrics listener's (docs/PRODUCTION.md, Deadlines).
var metricsTimeouts = serverTimeouts{header: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 2 * time.Minute}

// server is an HTTP server of h bounded by t.
func (t serverTimeouts) server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
}

// poolError is "PostgreSQL at host:port: err" with the password, should err
// hold it, masked.
func (s *Service) poolError(err error) string {
	cc := s.Pool.Config().ConnConfig
	msg := err.Error()
	if cc.Password != "" {
		msg = strings.ReplaceAll(msg, cc.Password, "xxxxx")
	}
	return fmt.Sprintf("PostgreSQL at %s:%d: %s", cc.Host, cc.Port, msg)
}
