package main

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/starter"
)

// bridgeCmd runs the Kafka bridge: attempt 1 inline, failures to Temporal.
type bridgeCmd struct{}

func (bridgeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	svc, err := openService(ctx, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg, reg := svc.cfg, svc.reg

	opts := starter.OptionsFromConfig(cfg)
	opts.Engine = starter.ProjectionEngine(svc.engine)
	opts.Starter = svc.temporal
	opts.Lanes = svc.temporal
	opts.Blocks = starter.NewPostgresBlockStore(svc.pool)
	opts.Probe = svc.pool.Ping
	opts.TemporalProbe = temporalProbe(svc.temporal)
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

// temporalProbe is the bridge's proof of a Temporal outage: the frontend's
// health check.
func temporalProbe(c client.Client) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}
}
