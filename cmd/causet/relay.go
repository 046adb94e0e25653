package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/app"
	"github.com/causet/projection-retry/relay"
	"github.com/causet/projection-retry/starter"
)

// relayCmd runs the outbox relay: ledger events to the events topic.
type relayCmd struct{}

// Run publishes until interrupted. It needs PostgreSQL and Kafka only, so
// it opens the pool itself rather than app.Open, which also dials Temporal.
func (relayCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	settings, err := relay.LoadSettings(os.LookupEnv)
	if err != nil {
		return err
	}
	if err := cfg.RequireDatabaseURL(); err != nil {
		return err
	}
	pool, err := app.OpenPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	kopts, err := app.KafkaSecurityOpts(cfg.KafkaSecurity)
	if err != nil {
		return err
	}
	kopts = append(kopts,
		kgo.WithLogger(starter.KafkaLogger(logger)),
		kgo.WithHooks(kprom.NewMetrics("causet_relay_kafka", kprom.Registerer(reg))),
	)
	r, err := relay.New(relay.Options{
		Pool:         pool,
		Brokers:      cfg.KafkaBrokers,
		KafkaOptions: kopts,
		Topic:        cfg.EventsTopic,
		Batch:        settings.Batch,
		PollInterval: settings.PollInterval,
		Logger:       logger,
		Registerer:   reg,
	})
	if err != nil {
		return err
	}
	// The service's /metrics server, on this registry; the relay has no
	// engine or Temporal client to open.
	svc := &app.Service{Config: cfg, Logger: logger, Registry: reg, Pool: pool}
	stopMetrics, err := svc.ServeMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	logger.Info("relay serving metrics", "metrics", cfg.MetricsAddr)
	return r.Run(ctx)
}
