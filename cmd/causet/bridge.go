package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
	"github.com/causet/projection-retry/worker"
)

// bridgeCmd runs the Kafka bridge: attempt 1 inline, failures to Temporal.
type bridgeCmd struct{}

func (bridgeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	if err := cfg.RequireDatabaseURL(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	pool, err := openPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	engine, err := projection.NewEngine(ctx, pool, logger)
	if err != nil {
		return err
	}
	defer engine.Close()

	tc, namespace, closeMetrics, err := dialTemporal(ctx, logger, reg)
	if err != nil {
		return err
	}
	defer tc.Close()
	defer closeMetrics()
	if err := worker.EnsureSearchAttributes(ctx, tc.OperatorService(), namespace); err != nil {
		return err
	}

	opts := starter.OptionsFromConfig(cfg)
	opts.Engine = starter.ProjectionEngine(engine)
	opts.Starter = tc
	opts.Lanes = tc
	opts.Blocks = starter.NewPostgresBlockStore(pool)
	opts.Logger = logger
	opts.Registerer = reg
	if opts.KafkaOptions, err = cfg.KafkaSecurity.Opts(); err != nil {
		return err
	}
	opts.KafkaOptions = append(opts.KafkaOptions, kgo.WithHooks(kprom.NewMetrics("causet_bridge_kafka", kprom.Registerer(reg))))
	stopMetrics, err := serveMetrics(cfg.MetricsAddr, reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	b, err := starter.New(opts)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}
