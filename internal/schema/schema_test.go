package schema_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/schema/schematest"
	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestMigrationsAreNumberedInOrderAndForwardOnly(t *testing.T) {
	all := schema.Migrations()
	require.NotEmpty(t, all)
	for i, m := range all {
		require.EqualValues(t, i+1, m.Version, m.Name)
		require.True(t, strings.HasPrefix(m.Name, fmt.Sprintf("%05d_", m.Version)), m.Name)
		require.NotContains(t, m.Up, "+goose Down", m.Name)
		require.NotEmpty(t, strings.TrimSpace(m.Up), m.Name)
		require.Contains(t, []schema.Kind{schema.Expand, schema.Contract}, m.Kind, m.Name)
	}
	require.Equal(t, all[len(all)-1].Version, schema.Latest())
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// An empty database lists every migration as pending; up applies them all
// and then none is pending; sql printed before up, applied by psql to a
// second empty database, gives the same schema and versions as up did.
func TestStatusUpAndSQLOnAnEmptyDatabase(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	viaUp, viaSQL := testenv.EmptyPostgres(t), testenv.EmptyPostgres(t)

	states, err := schema.Status(ctx, viaUp)
	require.NoError(t, err)
	require.Len(t, states, len(schema.Migrations()))
	for _, s := range states {
		require.True(t, s.Pending(), "%s is pending on an empty database", s.Name)
	}
	v, err := schema.Version(ctx, viaUp)
	require.NoError(t, err)
	require.Zero(t, v)
	script, err := schema.PendingSQL(ctx, viaSQL)
	require.NoError(t, err)
	require.Equal(t, 0, tableCount(t, viaSQL), "status and sql write nothing")
	for _, m := range schema.Migrations() {
		require.Contains(t, script, m.Up, "sql prints %s's Up section as written", m.Name)
	}

	applied, err := schema.Up(ctx, viaUp, nil)
	require.NoError(t, err)
	require.Equal(t, schema.Migrations(), applied)
	states, err = schema.Status(ctx, viaUp)
	require.NoError(t, err)
	for _, s := range states {
		require.False(t, s.Pending(), "%s is applied", s.Name)
		require.WithinDuration(t, time.Now(), s.Applied, time.Hour)
	}
	again, err := schema.PendingSQL(ctx, viaUp)
	require.NoError(t, err)
	require.Empty(t, again, "nothing pending, nothing printed")

	psql := testenv.PSQL(t)
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", viaSQL.Config().ConnString())
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "psql: %s", out)

	require.Equal(t, catalog(t, viaUp), catalog(t, viaSQL), "the printed SQL builds the schema up builds")
	require.Equal(t, versions(t, viaUp), versions(t, viaSQL), "and records the same versions")
	applied, err = schema.Up(ctx, viaSQL, nil)
	require.NoError(t, err)
	require.Empty(t, applied, "up finds the versions the script recorded")
}

// Migrations take a lock: runs that start together apply each migration
// once between them, and every one of them returns a migrated database.
func TestConcurrentUpsNeverInterleave(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	pool := testenv.EmptyPostgres(t)
	const runs = 4
	var wg sync.WaitGroup
	results := make([][]schema.Migration, runs)
	errs := make([]error, runs)
	for i := range runs {
		wg.Go(func() { results[i], errs[i] = schema.Up(ctx, pool, nil) })
	}
	wg.Wait()
	total := 0
	for i := range runs {
		require.NoError(t, errs[i])
		total += len(results[i])
	}
	require.Equal(t, len(schema.Migrations()), total, "each migration applied by exactly one run")
	var rows, distinct int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT version_id) FROM "+schema.Table+" WHERE version_id > 0").Scan(&rows, &distinct))
	require.Equal(t, len(schema.Migrations()), rows)
	require.Equal(t, rows, distinct)
}

// A process refuses an older schema (naming the command) unless it may
// migrate, and a newer one always; up refuses a newer one too.
func TestCheckRefusesOlderAndNewerSchemas(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	pool := testenv.EmptyPostgres(t)

	err := schema.Check(ctx, pool, false, nil)
	var old *schema.OutdatedError
	require.ErrorAs(t, err, &old)
	require.Equal(t, schema.OutdatedError{Have: 0, Need: schema.Latest()}, *old)
	require.Contains(t, err.Error(), "run `causet migrate up`")
	require.Equal(t, 0, tableCount(t, pool), "a refusal writes nothing")

	require.NoError(t, schema.Check(ctx, pool, true, nil), "with CAUSET_AUTO_MIGRATE the process migrates")
	v, err := schema.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	require.NoError(t, schema.Check(ctx, pool, false, nil), "up to date")

	_, err = pool.Exec(ctx, "INSERT INTO "+schema.Table+" (version_id, is_applied) VALUES ($1, true)", schema.Latest()+1)
	require.NoError(t, err)
	for _, auto := range []bool{false, true} {
		err = schema.Check(ctx, pool, auto, nil)
		var newer *schema.TooNewError
		require.ErrorAs(t, err, &newer, "auto=%v", auto)
		require.Equal(t, schema.TooNewError{Have: schema.Latest() + 1, Known: schema.Latest(),
			Stop: fmt.Sprintf("migration %d", schema.Latest()+1), Kind: "unrecorded"}, *newer)
		require.Contains(t, err.Error(), "must not write to a schema it does not understand")
	}
	_, err = schema.Up(ctx, pool, nil)
	require.True(t, errors.As(err, new(*schema.TooNewError)), "up refuses a newer schema: %v", err)
}

// The compatibility window: a build runs on a newer schema exactly when
// every migration past its own is an expand. Past a contract step (or one
// whose kind no build recorded) it refuses, with one line naming it; its
// `migrate up` (an init container not yet rolled) does nothing within the
// window and refuses past it.
func TestAnOlderBuildRunsWithinItsWindow(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	pool := testenv.EmptyPostgres(t)
	_, err := schema.Up(ctx, pool, nil)
	require.NoError(t, err)

	next := schema.Latest() + 1
	newer := func(version int64, name string, kind schema.Kind) {
		t.Helper()
		_, err := pool.Exec(ctx, "INSERT INTO "+schema.Table+" (version_id, is_applied) VALUES ($1, true)", version)
		require.NoError(t, err)
		if kind != "" {
			_, err = pool.Exec(ctx, "INSERT INTO "+schema.KindsTable+" (version, name, kind) VALUES ($1, $2, $3)", version, name, kind)
			require.NoError(t, err)
		}
	}
	var logs strings.Builder
	logger := slog.New(slog.NewJSONHandler(&logs, nil))

	newer(next, fmt.Sprintf("%05d_new_table.sql", next), schema.Expand)
	newer(next+1, fmt.Sprintf("%05d_new_column.sql", next+1), schema.Expand)
	for _, auto := range []bool{false, true} {
		require.NoError(t, schema.Check(ctx, pool, auto, logger), "two expand steps past this build: it runs (auto=%v)", auto)
	}
	require.Contains(t, logs.String(), `"msg":"the database schema is newer than this build, within its window`)
	require.Contains(t, logs.String(), fmt.Sprintf(`"schema_version":%d`, next+1))
	applied, err := schema.Up(ctx, pool, nil)
	require.NoError(t, err, "an older build's migrate has nothing to do within its window")
	require.Empty(t, applied)

	stop := fmt.Sprintf("%05d_drop_old_column.sql", next+2)
	newer(next+2, stop, schema.Contract)
	newer(next+3, fmt.Sprintf("%05d_another_table.sql", next+3), schema.Expand)
	for _, auto := range []bool{false, true} {
		err := schema.Check(ctx, pool, auto, logger)
		var tooNew *schema.TooNewError
		require.ErrorAs(t, err, &tooNew)
		require.Equal(t, schema.TooNewError{Have: next + 3, Known: schema.Latest(), Stop: stop, Kind: "contract"}, *tooNew)
		require.NotContains(t, err.Error(), "\n", "one line")
		require.Contains(t, err.Error(), stop+" is a contract step this build does not run on")
	}
	_, err = schema.Up(ctx, pool, nil)
	require.ErrorAs(t, err, new(*schema.TooNewError), "migrate refuses past the window")
}

// Every up records the kind of every migration of its build, and so does
// the printed SQL: what older builds read at start.
func TestUpRecordsEveryMigrationsKind(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	viaUp, viaSQL := testenv.EmptyPostgres(t), testenv.EmptyPostgres(t)
	_, err := schema.Up(ctx, viaUp, nil)
	require.NoError(t, err)
	script, err := schema.PendingSQL(ctx, viaSQL)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, testenv.PSQL(t), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", viaSQL.Config().ConnString())
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "psql: %s", out)

	var want []string
	for _, m := range schema.Migrations() {
		want = append(want, fmt.Sprintf("%d %s %s", m.Version, m.Name, m.Kind))
	}
	for _, pool := range []*pgxpool.Pool{viaUp, viaSQL} {
		rows, err := pool.Query(ctx, "SELECT version, name, kind FROM "+schema.KindsTable+" ORDER BY version")
		require.NoError(t, err)
		var got []string
		var v int64
		var name, kind string
		_, err = pgx.ForEachRow(rows, []any{&v, &name, &kind}, func() error {
			got = append(got, fmt.Sprintf("%d %s %s", v, name, kind))
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// A database of the release before versioned migrations, with its data, is
// adopted by migration 1 and carried to the newest version; its rows stay.
func TestUpAdoptsTheReleaseBeforeMigrations(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	pool := testenv.EmptyPostgres(t)
	schematest.LoadBeforeMigrations(t, pool)
	counts := func() map[string]int {
		out := map[string]int{}
		for _, table := range []string{"causet_projection_versions", "causet_intent_handlers", "causet_intents", "causet_events",
			"causet_projection_applied", "causet_incidents", "artist_stats"} {
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n), table)
			out[table] = n
		}
		return out
	}
	before := counts()
	require.Positive(t, before["causet_projection_applied"])
	v, err := schema.Version(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, v, "that release recorded no version")
	err = schema.Check(ctx, pool, false, nil)
	require.ErrorAs(t, err, new(*schema.OutdatedError))

	_, err = schema.Up(ctx, pool, nil)
	require.NoError(t, err)
	v, err = schema.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, schema.Latest(), v)
	after := counts()
	for table, n := range before {
		require.Equal(t, n, after[table], table)
	}
}

func tableCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')").Scan(&n))
	return n
}

// catalog describes the public schema: relations with their kind and
// partition bound, columns, constraints, indexes and functions.
func catalog(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT concat_ws(E'\n',
	(SELECT string_agg(c.relname || ' ' || c.relkind::text || ' ' || coalesce(pg_get_expr(c.relpartbound, c.oid), ''), E'\n' ORDER BY c.relname)
		FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'S')),
	(SELECT string_agg(c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
			|| ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), E'\n' ORDER BY c.relname, a.attnum)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped),
	(SELECT string_agg(conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conrelid::regclass::text, conname)
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace),
	(SELECT string_agg(indexdef, E'\n' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'public'),
	(SELECT string_agg(pg_get_functiondef(p.oid), E'\n' ORDER BY p.proname) FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace))`).Scan(&s))
	require.NotEmpty(t, s)
	return s
}

func versions(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version_id FROM "+schema.Table+" WHERE is_applied ORDER BY version_id")
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}
