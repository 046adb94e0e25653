package catalog

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/backoff"
)

// Watch keeps a cache of v's documents current: it LISTENs on v.Channel
// on a connection of its own and calls refresh after each (re)connect and on
// each deploy notification. With every > 0 it also calls refresh every
// interval, so that a deploy is used within it even while the listening
// connection is down. A lost connection is logged and opened again after a
// backoff (100 ms doubling to 5 s). Watch returns when ctx ends.
func (v Versions) Watch(ctx context.Context, pool *pgxpool.Pool, every time.Duration, refresh func(context.Context) error, logger *slog.Logger) {
	if every > 0 {
		go v.refreshEvery(ctx, every, refresh, logger)
	}
	wait := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		start := time.Now()
		err := v.listen(ctx, pool, refresh, logger)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			wait.Reset()
		}
		d := wait.Next()
		logger.Warn(v.Kind+" catalog listener lost its connection; deploys are picked up by other checks until it reconnects",
			"error", err.Error(), "retryIn", d.String())
		if backoff.Sleep(ctx, d) != nil {
			return
		}
	}
}

func (v Versions) listen(ctx context.Context, pool *pgxpool.Pool, refresh func(context.Context) error, logger *slog.Logger) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{v.Channel}.Sanitize()); err != nil {
		return err
	}
	for {
		// After LISTEN, so that no deploy falls between the load and the
		// first notification.
		if err := refresh(ctx); err != nil && ctx.Err() == nil {
			logger.Warn(v.Kind+" catalog refresh failed", "error", err.Error())
		}
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
	}
}

func (v Versions) refreshEvery(ctx context.Context, every time.Duration, refresh func(context.Context) error, logger *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := refresh(ctx); err != nil && ctx.Err() == nil {
				logger.Warn(v.Kind+" catalog refresh failed", "error", err.Error())
			}
		}
	}
}
