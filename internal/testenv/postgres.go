package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/proc"
	"github.com/causet/projection-retry/internal/schema"
)

const pgHowTo = "set TEST_DATABASE_URL=postgres://user:pass@host:port/db?sslmode=disable, " +
	"install the PostgreSQL server binaries (initdb, pg_ctl, postgres), or allow the one-time fetch of " +
	"PostgreSQL 15 from Maven Central (CAUSET_POSTGRES_BINARIES, docs/CONFIGURATION.md)"

// Postgres returns a pool connected to a fresh database that only this test
// uses, at the schema this build needs (every migration of package schema
// applied). The database lives on TEST_DATABASE_URL's server when that is
// set, otherwise on a throwaway cluster started once per test binary. The pool
// is closed and the database dropped when the test ends. The pool's
// Config().ConnString() is the database's URL.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return connect(t, PostgresURL(t))
}

// EmptyPostgres is Postgres on an empty database: no schema at all, for
// tests of the migrations themselves.
func EmptyPostgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return connect(t, EmptyPostgresURL(t))
}

func connect(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("testenv: pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testenv: ping fresh database: %v", err)
	}
	return pool
}

// PostgresURL creates a fresh database at the schema this build needs that
// only this test uses and returns its connection URL. The database is a copy
// of a template migrated once per test binary (CREATE DATABASE … TEMPLATE),
// and is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return createDatabase(t, migratedTemplate(t))
}

// EmptyPostgresURL is PostgresURL for an empty database.
func EmptyPostgresURL(t testing.TB) string {
	t.Helper()
	return createDatabase(t, "")
}

func createDatabase(t testing.TB, template string) string {
	t.Helper()
	admin := postgresAdminURL(t)
	name := uniqueName(t, "t", "_", 63)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stmt := `CREATE DATABASE "` + name + `"`
	if template != "" {
		stmt += ` TEMPLATE "` + template + `"`
	}
	err := adminExec(ctx, admin, stmt)
	// A session of the template that has just closed may still be ending.
	for try := 0; err != nil && isObjectInUse(err) && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		err = adminExec(ctx, admin, stmt)
	}
	if err != nil {
		if os.Getenv("TEST_DATABASE_URL") != "" {
			unavailable(t, "cannot create a test database on TEST_DATABASE_URL (is it reachable, and may its user CREATE DATABASE?): %v", err)
		}
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, admin, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	dbURL, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dbURL
}

var templateState struct {
	once sync.Once
	name string
	err  error
}

// migratedTemplate returns the database every PostgresURL copies: created
// and migrated on first use, dropped at Teardown. Copying it costs a file
// copy, where migrating each test's database would run every migration.
func migratedTemplate(t testing.TB) string {
	t.Helper()
	admin := postgresAdminURL(t)
	templateState.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name := fmt.Sprintf("causet_template_%d_%x", os.Getpid(), uint32(time.Now().UnixNano()))
		templateState.err = func() error {
			if err := adminExec(ctx, admin, `CREATE DATABASE "`+name+`"`); err != nil {
				return fmt.Errorf("create template database: %w", err)
			}
			onTeardown(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = adminExec(ctx, admin, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
			})
			dbURL, err := withDatabase(admin, name)
			if err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, dbURL)
			if err != nil {
				return err
			}
			// Closed before anyone copies it: CREATE DATABASE … TEMPLATE
			// refuses a template with sessions.
			defer pool.Close()
			if _, err := schema.Up(ctx, pool, nil); err != nil {
				return fmt.Errorf("migrate the template database: %w", err)
			}
			return nil
		}()
		templateState.name = name
	})
	if templateState.err != nil {
		t.Fatalf("testenv: %v", templateState.err)
	}
	return templateState.name
}

// NeedStoppablePostgres skips t when StopPostgres could not stop the
// server (TEST_DATABASE_URL names one this process does not own). A test
// that starts work before its outage calls it first, so that it does not
// skip with that work still running.
func NeedStoppablePostgres(t testing.TB) {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("testenv: StopPostgres needs the throwaway cluster; TEST_DATABASE_URL is set, so the server cannot be stopped")
	}
}

// StopPostgres stops the throwaway cluster (pg_ctl stop -m immediate: open
// connections are cut, new ones are refused) so a test can observe an outage.
// [StartPostgres] brings it back on the same port with the same data; if the
// test does not, it is restarted when the test ends. Skips when
// TEST_DATABASE_URL is set, since an external server cannot be controlled.
func StopPostgres(t testing.TB) {
	t.Helper()
	NeedStoppablePostgres(t)
	postgresAdminURL(t)
	c := pgState.c
	if err := c.Halt(); err != nil {
		t.Fatalf("testenv: stop postgres: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Resume(context.Background()); err != nil {
			t.Errorf("testenv: restart postgres after test: %v", err)
		}
	})
}

// StartPostgres restarts the cluster stopped by [StopPostgres] (no-op if it is
// running) and waits until it accepts connections.
func StartPostgres(t testing.TB) {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("testenv: StartPostgres needs the throwaway cluster; TEST_DATABASE_URL is set")
	}
	postgresAdminURL(t)
	if err := pgState.c.Resume(context.Background()); err != nil {
		t.Fatalf("testenv: start postgres: %v", err)
	}
}

// isObjectInUse reports PostgreSQL's object_in_use (55006): CREATE DATABASE
// … TEMPLATE while the template has a session.
func isObjectInUse(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55006"
}

func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns connString pointing at database db.
func withDatabase(connString, db string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
		}
		u.Path = "/" + db
		u.RawPath = ""
		return u.String(), nil
	}
	return connString + " dbname=" + db, nil
}

var pgState struct {
	once sync.Once
	c    *proc.Postgres
	err  error
}

// postgresAdminURL returns a URL to a maintenance database on which tests may
// create databases, starting the throwaway cluster on first use.
func postgresAdminURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	pgState.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := proc.StartPostgres(ctx, proc.PostgresOptions{MaxConnections: 300})
		if err != nil {
			pgState.err = err
			return
		}
		pgState.c = c
		onTeardown(func() {
			_ = c.Halt() // immediate: the data dir is removed anyway
			_ = c.Stop()
		})
	})
	if pgState.err != nil {
		unavailable(t, "no PostgreSQL: %v\n%s", pgState.err, pgHowTo)
	}
	return pgState.c.URL
}

// PSQL returns the path of psql: beside the PostgreSQL server binaries the
// tests use, or on PATH. Without one the test is skipped (failed under
// CI=true).
func PSQL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if dir, err := proc.PostgresBinDir(ctx); err == nil {
		if p := filepath.Join(dir, "psql"); isFile(p) {
			return p
		}
	}
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	unavailable(t, "no psql beside the PostgreSQL server binaries or on PATH (apt-get install postgresql-client)")
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
