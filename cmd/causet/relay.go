package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/causet/projection-retry/relay"
)

// relayCmd runs the outbox relay: ledger events to the events topic.
type relayCmd struct{}

// Run publishes until interrupted. It needs PostgreSQL and Kafka only, so
// the service is opened WithWritePathOnly (no projection engine, no
// Temporal); its registry, /healthz and /readyz (PostgreSQL) are served on
// CAUSET_METRICS_ADDR.
func (relayCmd) Run(ctx context.Context, logger *slog.Logger) error {
	settings, err := relay.LoadSettings(os.LookupEnv)
	if err != nil {
		return err
	}
	svc, err := openWritePath(ctx, logger)
	if err != nil {
		return err
	}
	cfg := svc.Config
	defer svc.Close()
	stopMetrics, err := svc.ServeMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	r, err := svc.NewRelay(settings)
	if err != nil {
		return err
	}
	logger.Info("relay serving metrics", "metrics", cfg.MetricsAddr)
	return r.Run(ctx)
}
