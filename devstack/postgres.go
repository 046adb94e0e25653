package devstack

import (
	"context"
	"errors"
	"fmt"

	"github.com/causet/projection-retry/internal/proc"
)

// Postgres is a throwaway PostgreSQL cluster in a temp dir, listening on
// 127.0.0.1 with trust authentication (see [proc.Postgres]). Stop it with
// Stop.
type Postgres = proc.Postgres

// StartPostgres initialises a cluster in a new temp dir (causet-dev-pg-*),
// starts it with pg_ctl on a free 127.0.0.1 port and waits until it accepts
// TCP connections. Without system PostgreSQL server binaries it fetches
// PostgreSQL 15 once into a cache ([proc.PostgresBinariesEnv]). When running
// as root, the server runs as the "postgres" system user (or "nobody"). On
// error nothing is left behind.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	p, err := proc.StartPostgres(ctx, proc.PostgresOptions{TempDirPrefix: "causet-dev-pg-"})
	if errors.Is(err, proc.ErrNoPostgres) {
		return nil, fmt.Errorf("%w; or set DATABASE_URL to a running server", err)
	}
	return p, err
}
