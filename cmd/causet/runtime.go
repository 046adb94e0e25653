package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/ledger"
	"github.com/causet/projection-retry/runtime"
)

// runtimeCmd serves the write path: POST /v1/intents and friends.
type runtimeCmd struct{}

func (runtimeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	addr, err := runtime.AddrFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	pool, err := openDatabase(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := ledger.EnsureSchema(ctx, pool); err != nil {
		return err
	}
	if err := intents.EnsureSchema(ctx, pool); err != nil {
		return err
	}
	catalog, err := intents.NewCatalog(ctx, pool, logger, intents.WithCostLimit(cfg.IRCostLimit))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := runtime.New(runtime.Options{
		Catalog:    catalog,
		Ledger:     ledger.New(pool, catalog, ledger.WithLogger(logger)),
		Ready:      pool.Ping,
		Logger:     logger,
		Registerer: reg,
		Gatherer:   reg,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("CAUSET_RUNTIME_ADDR=%s: %w", addr, err)
	}
	logger.Info("runtime started", "addr", ln.Addr().String(), "intentTypes", catalog.IntentTypes())
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	logger.Info("runtime stopped")
	return nil
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
