package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/testenv"
)

// causet migrate status lists every migration as pending on an empty
// database and none after up; sql prints what up then runs.
func TestMigrateStatusSQLUp(t *testing.T) {
	env := []string{"DATABASE_URL=" + testenv.EmptyPostgresURL(t)}
	n := len(schema.Migrations())

	stdout, stderr, code := runBinary(t, env, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.Len(t, regexp.MustCompile(`(?m)^\d+ +pending +- +\d{5}_\S+\.sql$`).FindAllString(stdout, -1), n, stdout)
	require.Contains(t, stdout, fmt.Sprintf("the database schema is at version 0; %d pending", n))

	script, stderr, code := runBinary(t, env, "migrate", "sql")
	require.Equal(t, 0, code, stderr)
	for _, m := range schema.Migrations() {
		require.Contains(t, script, "-- migration "+fmt.Sprint(m.Version)+": "+m.Name+"\n")
		require.Contains(t, script, m.Up)
	}

	stdout, stderr, code = runBinary(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	for _, m := range schema.Migrations() {
		require.Contains(t, stdout, fmt.Sprintf("applied %s (version %d)\n", m.Name, m.Version))
	}
	stdout, stderr, code = runBinary(t, env, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "pending  -")
	require.Contains(t, stdout, fmt.Sprintf("the database schema is at version %d: up to date", schema.Latest()))
	stdout, stderr, code = runBinary(t, env, "migrate", "sql")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "nothing pending")
	stdout, stderr, code = runBinary(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "nothing to apply")
}

// Every process that uses the database checks its schema version at start:
// an older one is refused with one line naming `causet migrate up`, a newer
// one with one line too, and nothing is written.
func TestProcessesRefuseOlderAndNewerSchemas(t *testing.T) {
	commands := [][]string{{"worker"}, {"bridge"}, {"runtime"}, {"relay"}, {"projections", "list"}, {"intents", "list"}}
	older := testenv.EmptyPostgresURL(t)
	newer := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, newer)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "INSERT INTO "+schema.Table+" (version_id, is_applied) VALUES ($1, true)", schema.Latest()+1)
	require.NoError(t, err)

	for _, args := range commands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			base := []string{"CAUSET_METRICS_ADDR=127.0.0.1:0", "CAUSET_RUNTIME_ADDR=127.0.0.1:0", "KAFKA_BROKERS=127.0.0.1:1", "CAUSET_RUNTIME_AUTH=none"}
			_, stderr, code := runBinary(t, append(base, "DATABASE_URL="+older), args...)
			require.Equal(t, 1, code, stderr)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", stderr)
			require.Contains(t, lines[0], fmt.Sprintf("the database schema is at version 0 and this build needs version %d: run `causet migrate up`", schema.Latest()))

			_, stderr, code = runBinary(t, append(base, "DATABASE_URL="+newer), args...)
			require.Equal(t, 1, code, stderr)
			lines = strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", stderr)
			require.Contains(t, lines[0], fmt.Sprintf("the database schema is at version %d, newer than this build knows (%d)", schema.Latest()+1, schema.Latest()))
		})
	}
	var tables int
	opool, err := pgxpool.New(ctx, older)
	require.NoError(t, err)
	defer opool.Close()
	require.NoError(t, opool.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')").Scan(&tables))
	require.Zero(t, tables, "no process wrote to the older database")
}

// An older build on a newer schema (a pod restarted halfway through a
// rolling upgrade, its migrate init container still of the old build) runs
// while every migration past its own is an expand, and is refused with one
// line naming the first contract step past it.
func TestAnOlderBuildRunsWithinItsWindow(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	newer := func(version int64, name string, kind schema.Kind) {
		_, err := pool.Exec(ctx, "INSERT INTO "+schema.Table+" (version_id, is_applied) VALUES ($1, true)", version)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+schema.KindsTable+" (version, name, kind) VALUES ($1, $2, $3)", version, name, kind)
		require.NoError(t, err)
	}
	env := []string{"DATABASE_URL=" + url}
	next := schema.Latest() + 1

	newer(next, fmt.Sprintf("%05d_a_new_table.sql", next), schema.Expand)
	stdout, stderr, code := runBinary(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("nothing to apply: the database schema is at version %d, newer than this build's %d and within its window", next, schema.Latest()))
	stdout, stderr, code = runBinary(t, env, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "within its window: every migration past it is an expand step, and this build runs on it")
	stdout, stderr, code = runBinary(t, env, "projections", "list")
	require.Equal(t, 0, code, "a command of the older build runs: %s", stderr)
	require.NotContains(t, stdout+stderr, "newer than this build")

	stop := fmt.Sprintf("%05d_drop_a_column.sql", next+1)
	newer(next+1, stop, schema.Contract)
	for _, args := range [][]string{{"projections", "list"}, {"migrate", "up"}} {
		_, stderr, code = runBinary(t, env, args...)
		require.Equal(t, 1, code, stderr)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.Len(t, lines, 1, "one line: %q", stderr)
		require.Contains(t, lines[0], fmt.Sprintf("newer than this build knows (%d), and %s is a contract step this build does not run on", schema.Latest(), stop))
	}
	stdout, stderr, code = runBinary(t, env, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, stop+" is a contract step")
}
