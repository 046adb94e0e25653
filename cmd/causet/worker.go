package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
	"github.com/causet/projection-retry/worker"
)

type workerCmd struct{}

func (workerCmd) Run(ctx context.Context, logger *slog.Logger) error {
	svc, err := openService(ctx, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg := svc.cfg

	producer, err := newKafkaClient(cfg,
		kgo.DefaultProduceTopic(cfg.DLQTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(starter.KafkaLogger(logger)),
	)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer producer.Close()

	w, err := worker.New(worker.Options{
		Client:    svc.temporal,
		TaskQueue: cfg.TaskQueue,
		Activities: &activities.Activities{
			Applier:   svc.engine,
			Publisher: &dlq.Publisher{Client: producer, Topic: cfg.DLQTopic},
			Logger:    logger,
			Metrics:   activities.NewMetrics(svc.reg),
		},
	})
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(cfg.MetricsAddr, svc.reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	logger.Info("worker started", "taskQueue", cfg.TaskQueue, "metrics", cfg.MetricsAddr)
	// Run returns once ctx is done and running activities have drained.
	return w.Run(interruptOn(ctx))
}

// service is what the long-running commands (bridge, worker) share: the
// configuration, the metrics registry, the one pgx pool, the projection
// engine and the Temporal client, with the search attributes in place.
type service struct {
	cfg      config.Config
	reg      *prometheus.Registry
	pool     *pgxpool.Pool
	engine   *projection.Engine
	temporal client.Client
	closers  []func()
}

func openService(ctx context.Context, logger *slog.Logger) (_ *service, err error) {
	s := &service{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.cfg, err = config.FromEnv(); err != nil {
		return nil, err
	}
	if err := s.cfg.RequireDatabaseURL(); err != nil {
		return nil, err
	}
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.pool, err = openPool(ctx, s.cfg.DatabaseURL); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.pool.Close)
	if s.engine, err = projection.NewEngine(ctx, s.pool, logger, projection.WithCostLimit(s.cfg.IRCostLimit)); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.engine.Close)
	tc, namespace, closeMetrics, err := dialTemporal(ctx, logger, s.reg)
	if err != nil {
		return nil, err
	}
	s.temporal = tc
	s.closers = append(s.closers, closeMetrics, tc.Close)
	if err := worker.EnsureSearchAttributes(ctx, tc.OperatorService(), namespace); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases what openService opened, newest first.
func (s *service) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// newKafkaClient builds a Kafka client with the configured brokers, TLS and SASL.
func newKafkaClient(cfg config.Config, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := cfg.KafkaOpts(extra...)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(opts...)
}

// openPool builds the one pgx pool of the process; errors never echo the URL,
// which may hold a password.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("DATABASE_URL is not a valid PostgreSQL URL")
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}

// dialTemporal builds the client from TEMPORAL_* with Temporal's own
// envconfig and returns it with its namespace.
func dialTemporal(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer) (client.Client, string, func(), error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return nil, "", nil, fmt.Errorf("temporal client configuration: %w", err)
	}
	if opts.HostPort == "" {
		opts.HostPort = "127.0.0.1:7233"
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	opts.Logger = worker.SDKLogger(logger)
	closeMetrics := func() {}
	if reg != nil {
		h, closer, err := worker.MetricsHandler(reg, logger)
		if err != nil {
			return nil, "", nil, err
		}
		opts.MetricsHandler, closeMetrics = h, closer
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		closeMetrics()
		return nil, "", nil, fmt.Errorf("connect to Temporal at %s: %w", opts.HostPort, err)
	}
	return c, opts.Namespace, closeMetrics, nil
}

func serveMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("CAUSET_METRICS_ADDR=%s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

// interruptOn turns ctx's end into the worker's interrupt channel.
func interruptOn(ctx context.Context) <-chan interface{} {
	ch := make(chan interface{})
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}
