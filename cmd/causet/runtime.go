package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/intentapi"
)

// runtimeCmd serves the write path: POST /v1/intents and friends.
type runtimeCmd struct{}

// Run serves until interrupted. It needs PostgreSQL only, so the service is
// opened WithWritePathOnly (no projection engine, no Temporal).
func (runtimeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	addr, err := intentapi.AddrFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	auth, err := intentapi.AuthFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	svc, err := openWritePath(ctx, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	if auth == nil {
		logger.Warn("the runtime's API has no authentication (CAUSET_RUNTIME_AUTH=none): whoever reaches it writes intents")
	}
	rt, err := svc.NewRuntime(ctx, app.RuntimeOptions{Addr: addr, Auth: auth})
	if err != nil {
		return err
	}
	// /metrics, /healthz and /readyz on CAUSET_METRICS_ADDR, apart from the API.
	stopMetrics, err := svc.ServeMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	return rt.Run(ctx)
}

// openWritePath opens the service from the environment with PostgreSQL
// and Kafka only: the write path needs no projection engine and no Temporal.
func openWritePath(ctx context.Context, logger *slog.Logger) (*app.Service, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	return app.Open(ctx, cfg, app.WithLogger(logger), app.WithWritePathOnly())
}
