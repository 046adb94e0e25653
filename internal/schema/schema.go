package schema

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var files embed.FS

// Table records the applied migrations: goose's version table, one row per
// applied version (and version 0, written when the table is created).
const Table = "causet_schema_migrations"

// lockID is the session-level advisory lock every `up` holds, so that two
// runs (two processes starting with CAUSET_AUTO_MIGRATE, an operator's
// `causet migrate up` beside them) never interleave. It is a single bigint:
// "caus" "et" 0x10, in the space of the project's other bigint locks.
const lockID int64 = 0x63617573_65740010

// Migration is one numbered migration embedded in the binary.
type Migration struct {
	// Version is its number: 1 is the schema of the release before versioned
	// migrations, each later change the next number.
	Version int64
	// Name is its file name (00002_parked_events.sql).
	Name string
	// Up is the SQL that `up` runs, as written in the file (goose's
	// annotations are SQL comments).
	Up string
	// NoTransaction is true for a migration that cannot run in a transaction
	// (CREATE INDEX CONCURRENTLY): goose runs its statements one by one.
	NoTransaction bool
	// Kind says whether the previous release's processes run on its result
	// (Expand) or not (Contract): its file's "-- +causet expand" or
	// "-- +causet contract" line.
	Kind Kind
}

// Kind is a migration's place in the compatibility window.
type Kind string

const (
	// Expand: the previous release's processes run on the result (new
	// tables, nullable columns, columns with defaults, indexes).
	Expand Kind = "expand"
	// Contract: they do not (something they use is dropped or changed).
	Contract Kind = "contract"
)

// KindsTable records the kind of every migration the database has seen,
// written by every `up` for every migration of its build, so that an older
// build can tell whether it runs on a newer schema.
const KindsTable = "causet_schema_kinds"

// State is one migration's state in a database.
type State struct {
	Migration
	// Applied is when it was applied; zero while it is pending.
	Applied time.Time
}

// Pending reports whether the migration is still to be applied.
func (s State) Pending() bool { return s.Applied.IsZero() }

// Migrations returns every embedded migration in version order.
func Migrations() []Migration {
	out, err := load()
	if err != nil {
		// The files are embedded and checked by the package's tests.
		panic(err)
	}
	return out
}

// Latest is the version this build needs and knows: that of its newest
// migration.
func Latest() int64 {
	all := Migrations()
	return all[len(all)-1].Version
}

func load() ([]Migration, error) {
	names, err := fs.Glob(files, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		version, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || version < 1 {
			return nil, fmt.Errorf("schema: migration file %s does not start with a version number and '_'", base)
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		up, noTx, kind, err := upSection(string(body))
		if err != nil {
			return nil, fmt.Errorf("schema: migration %s: %w", base, err)
		}
		out = append(out, Migration{Version: version, Name: base, Up: up, NoTransaction: noTx, Kind: kind})
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version - b.Version) })
	for i, m := range out {
		if m.Version != int64(i+1) {
			return nil, fmt.Errorf("schema: migration %s: versions must be 1, 2, 3, … without gaps (want %d)", m.Name, i+1)
		}
	}
	return out, nil
}

// upSection returns the part of a goose migration file that `up` runs: from
// the "-- +goose Up" line to "-- +goose Down" or the end, and the kind its
// header declares. Migrations are forward-only; a Down section is refused,
// so that no one mistakes it for a supported rollback.
func upSection(file string) (string, bool, Kind, error) {
	var b strings.Builder
	noTx, inUp := false, false
	var kind Kind
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		line := sc.Text()
		switch strings.TrimSpace(line) {
		case "-- +goose NO TRANSACTION":
			noTx = true
			continue
		case "-- +goose Up":
			inUp = true
			continue
		case "-- +goose Down":
			return "", false, "", errors.New("has a Down section: migrations are forward-only")
		case "-- +causet expand", "-- +causet contract":
			if inUp || kind != "" {
				return "", false, "", errors.New("declares its kind twice, or after '-- +goose Up'")
			}
			kind = Kind(strings.TrimPrefix(strings.TrimSpace(line), "-- +causet "))
			continue
		}
		if inUp {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	if !inUp {
		return "", false, "", errors.New("has no '-- +goose Up' line")
	}
	if kind == "" {
		return "", false, "", errors.New("declares no kind: add '-- +causet expand' (the previous release runs on its result) or '-- +causet contract' before '-- +goose Up'")
	}
	return strings.TrimSpace(b.String()) + "\n", noTx, kind, nil
}

// Applied returns the versions applied to the database and when, read
// without writing anything: none when the version table does not exist.
func Applied(ctx context.Context, q Querier) (map[int64]time.Time, error) {
	exists, err := hasVersionTable(ctx, q)
	if err != nil {
		return nil, err
	}
	out := map[int64]time.Time{}
	if !exists {
		return out, nil
	}
	rows, err := q.Query(ctx, "SELECT version_id, tstamp FROM "+Table+" WHERE is_applied AND version_id > 0")
	if err != nil {
		return nil, fmt.Errorf("read the schema version: %w", err)
	}
	type row struct {
		version int64
		at      time.Time
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.version, &x.at)
	})
	if err != nil {
		return nil, fmt.Errorf("read the schema version: %w", err)
	}
	for _, x := range got {
		out[x.version] = x.at
	}
	return out, nil
}

func hasVersionTable(ctx context.Context, q Querier) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", Table).Scan(&exists); err != nil {
		return false, fmt.Errorf("read the schema version: %w", err)
	}
	return exists, nil
}

// Querier is what the read-only functions need: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Version is the database's schema version: its highest applied migration
// (0 before any).
func Version(ctx context.Context, q Querier) (int64, error) {
	applied, err := Applied(ctx, q)
	if err != nil {
		return 0, err
	}
	var v int64
	for version := range applied {
		v = max(v, version)
	}
	return v, nil
}

// Status returns every migration this build knows with its state in the
// database, in version order; it writes nothing.
func Status(ctx context.Context, q Querier) ([]State, error) {
	applied, err := Applied(ctx, q)
	if err != nil {
		return nil, err
	}
	all := Migrations()
	out := make([]State, len(all))
	for i, m := range all {
		out[i] = State{Migration: m, Applied: applied[m.Version]}
	}
	return out, nil
}

// Up applies the pending migrations in order, each in a transaction of its
// own (but those marked NO TRANSACTION), under a session-level advisory
// lock, and returns those it applied. On a database at a version newer
// than this build knows it applies nothing: within the build's window it
// returns nil, past it a TooNewError (InWindow). logger may be nil.
func Up(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) ([]Migration, error) {
	have, err := Version(ctx, pool)
	if err != nil {
		return nil, err
	}
	if have > Latest() {
		// An older build's `migrate` (an init container not yet rolled)
		// has nothing to do on a schema within its window.
		return nil, InWindow(ctx, pool, have)
	}
	// Migrations run without the sessions' statement_timeout: an index
	// built on a large table takes as long as it takes.
	mc := pool.Config()
	mc.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	mc.MaxConns = 4
	mpool, err := pgxpool.NewWithConfig(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer mpool.Close()
	db := stdlib.OpenDBFromPool(mpool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID),
		// Another run holds the lock while it migrates: wait for it (up to
		// 10 minutes), then find nothing left to do.
		lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(files, "migrations")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithTableName(Table), goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger.With("component", "migrate")))
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	// Kinds are recorded before the migrations they describe, where the
	// table exists already: a process of an older build that starts as they
	// apply finds the kind of each version it meets.
	if err := recordKinds(ctx, pool); err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err == nil {
		err = recordKinds(ctx, pool)
	}
	var applied []Migration
	byVersion := Migrations()
	for _, r := range results {
		if r != nil && r.Error == nil && r.Source != nil {
			applied = append(applied, byVersion[r.Source.Version-1])
		}
	}
	if err != nil {
		return applied, fmt.Errorf("apply schema migrations: %w", err)
	}
	return applied, nil
}

// recordKinds writes the kind of every migration of this build to
// KindsTable, once the table exists (migration 7 creates it).
func recordKinds(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", KindsTable).Scan(&exists); err != nil || !exists {
		return err
	}
	var versions []int64
	var names, kinds []string
	for _, m := range Migrations() {
		versions, names, kinds = append(versions, m.Version), append(names, m.Name), append(kinds, string(m.Kind))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+KindsTable+` (version, name, kind)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])
ON CONFLICT (version) DO UPDATE SET name = excluded.name, kind = excluded.kind`, versions, names, kinds); err != nil {
		return fmt.Errorf("record the migrations' kinds: %w", err)
	}
	return nil
}

// InWindow tells whether this build runs on a database at version have,
// newer than it knows: exactly when every migration past its own is an
// expand. Otherwise it returns a TooNewError naming the first migration
// that stops it (a contract step, or one whose kind is not recorded).
func InWindow(ctx context.Context, q Querier, have int64) error {
	known := Latest()
	if have <= known {
		return nil
	}
	kinds := map[int64][2]string{}
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", KindsTable).Scan(&exists); err != nil {
		return fmt.Errorf("read the migrations' kinds: %w", err)
	}
	if exists {
		rows, err := q.Query(ctx, "SELECT version, name, kind FROM "+KindsTable+" WHERE version > $1", known)
		if err != nil {
			return fmt.Errorf("read the migrations' kinds: %w", err)
		}
		var v int64
		var name, kind string
		if _, err := pgx.ForEachRow(rows, []any{&v, &name, &kind}, func() error {
			kinds[v] = [2]string{name, kind}
			return nil
		}); err != nil {
			return fmt.Errorf("read the migrations' kinds: %w", err)
		}
	}
	for v := known + 1; v <= have; v++ {
		k, ok := kinds[v]
		if !ok {
			return &TooNewError{Have: have, Known: known, Stop: fmt.Sprintf("migration %d", v), Kind: "unrecorded"}
		}
		if Kind(k[1]) != Expand {
			return &TooNewError{Have: have, Known: known, Stop: k[0], Kind: k[1]}
		}
	}
	return nil
}

// OutdatedError is a database whose schema is older than this build needs.
type OutdatedError struct{ Have, Need int64 }

func (e *OutdatedError) Error() string {
	return fmt.Sprintf("the database schema is at version %d and this build needs version %d: run `causet migrate up` (see the pending changes with `causet migrate status` and `causet migrate sql`), or set CAUSET_AUTO_MIGRATE=true to let processes migrate at start",
		e.Have, e.Need)
}

// TooNewError is a database whose schema is newer than this build knows,
// past its window: a migration this build does not know is a contract step
// (or its kind is not recorded), and a build that was rolled back past it
// must not write to it.
type TooNewError struct {
	Have, Known int64
	// Stop names the first migration past Known that is not an expand, and
	// Kind is its kind ("contract", or "unrecorded").
	Stop, Kind string
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("the database schema is at version %d, newer than this build knows (%d), and %s is a %s step this build does not run on: run a build that knows version %d or later; this one must not write to a schema it does not understand",
		e.Have, e.Known, e.Stop, e.Kind, e.Have)
}

// Check is what every process does at start: it reads the database's
// version and refuses an older one (OutdatedError; with auto it migrates
// instead, logging each migration it applies) and a newer one past its
// window (TooNewError). On a newer one within the window (every migration
// it does not know is an expand) it runs, and logs that it does.
func Check(ctx context.Context, pool *pgxpool.Pool, auto bool, logger *slog.Logger) error {
	have, err := Version(ctx, pool)
	if err != nil {
		return err
	}
	switch need := Latest(); {
	case have > need:
		if err := InWindow(ctx, pool, have); err != nil {
			return err
		}
		if logger != nil {
			logger.Warn("the database schema is newer than this build, within its window: every migration past this build's is an expand step",
				"component", "migrate", "schema_version", have, "build_schema_version", need)
		}
		return nil
	case have == need:
		return nil
	case !auto:
		return &OutdatedError{Have: have, Need: need}
	}
	applied, err := Up(ctx, pool, nil)
	for _, m := range applied {
		if logger != nil {
			logger.Info("schema migration applied", "component", "migrate", "version", m.Version, "migration", m.Name)
		}
	}
	return err
}
