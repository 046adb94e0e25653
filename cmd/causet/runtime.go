package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/app"
	"github.com/causet/projection-retry/runtime"
)

// runtimeCmd serves the write path: POST /v1/intents and friends.
type runtimeCmd struct{}

// Run serves until interrupted. It needs PostgreSQL only, so the service is
// opened WithWritePathOnly (no projection engine, no Temporal).
func (runtimeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	addr, err := runtime.AddrFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	svc, err := app.Open(ctx, cfg, app.WithLogger(logger), app.WithWritePathOnly())
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

// openDatabase connects to DATABASE_URL (maxConns 0 keeps pgx's default or
// the URL's pool_max_conns) and checks that it answers. Errors name the
// host, never the URL, which may hold a password.
func openDatabase(ctx context.Context, cfg config.Config, maxConns int32) (*pgxpool.Pool, error) {
	if err := cfg.RequireDatabaseURL(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a valid PostgreSQL connection string")
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	// Broken connections are found and replaced between requests too.
	pc.HealthCheckPeriod = 10 * time.Second
	where := fmt.Sprintf("%s:%d", pc.ConnConfig.Host, pc.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: connect to PostgreSQL at %s: %v", where, errorWithoutPassword(err, pc.ConnConfig.Password))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("DATABASE_URL: cannot reach PostgreSQL at %s: %v", where, errorWithoutPassword(err, pc.ConnConfig.Password))
	}
	return pool, nil
}
