package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/app"
	"github.com/causet/projection-retry/runtime"
)

// runtimeCmd serves the write path: POST /v1/intents and friends.
type runtimeCmd struct{}

// Run serves until interrupted. It needs PostgreSQL only, so the service is
// opened WithWritePathOnly (no projection engine, no Temporal).
func (runtimeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	addr, err := runtime.AddrFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	svc, err := openWritePath(ctx, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	rt, err := svc.NewRuntime(ctx, app.RuntimeOptions{Addr: addr})
	if err != nil {
		return err
	}
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
