package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// projections list ends with the dedupe ledger: its size, oldest entry and
// horizon, as an operator checks them.
func TestProjectionsListShowsTheDedupeLedger(t *testing.T) {
	url := testenv.PostgresURL(t)
	env := []string{"DATABASE_URL=" + url}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	stdout, stderr, code := runBinary(t, env, "projections", "list")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "no projections deployed\n"), stdout)
	require.Contains(t, stdout, "dedupe ledger: ")
	require.Contains(t, stdout, "0 hour partitions and bucket 0 (about 0 rows); oldest entry none; horizon 336h0m0s")
	require.Contains(t, stdout, "hour partitions: none yet")

	_, _, err = projection.MaintainDedupe(ctx, pool, 24*time.Hour)
	require.NoError(t, err)
	stdout, stderr, code = runBinary(t, env, "projections", "list")
	require.Equal(t, 0, code, stderr)
	// 24 h back and 48 h ahead of the current hour.
	require.Contains(t, stdout, " in 73 hour partitions and bucket 0")
	require.Contains(t, stdout, "horizon 24h0m0s")
	require.Regexp(t, `hour partitions: occurredAt \S+ to \S+, maintained \S+\n`, stdout)
	require.Regexp(t, `dedupe ledger: \d+\.\d (KiB|MiB) in`, stdout)
}

func TestBytesIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		require.Equal(t, want, bytesIEC(n), n)
	}
}
