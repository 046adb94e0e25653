package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const pgHowTo = "set TEST_DATABASE_URL=postgres://user:pass@host:port/db?sslmode=disable, " +
	"or install the PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH"

// Postgres returns a pool connected to a fresh, empty database that only this
// test uses. The database lives on TEST_DATABASE_URL's server when that is
// set, otherwise on a throwaway cluster started once per test binary. The pool
// is closed and the database dropped when the test ends. The pool's
// Config().ConnString() is the database's URL.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := PostgresURL(t)
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

// PostgresURL creates a fresh, empty database that only this test uses and
// returns its connection URL. The database is dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := postgresAdminURL(t)
	name := uniqueName(t, "t", "_", 63)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adminExec(ctx, admin, `CREATE DATABASE "`+name+`"`); err != nil {
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

// StopPostgres stops the throwaway cluster (pg_ctl stop -m immediate: open
// connections are cut, new ones are refused) so a test can observe an outage.
// [StartPostgres] brings it back on the same port with the same data; if the
// test does not, it is restarted when the test ends. Skips when
// TEST_DATABASE_URL is set, since an external server cannot be controlled.
func StopPostgres(t testing.TB) {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("testenv: StopPostgres needs the throwaway cluster; TEST_DATABASE_URL is set, so the server cannot be stopped")
	}
	postgresAdminURL(t)
	c := pgState.c
	if err := c.stop(); err != nil {
		t.Fatalf("testenv: stop postgres: %v", err)
	}
	t.Cleanup(func() {
		if err := c.start(); err != nil {
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
	if err := pgState.c.start(); err != nil {
		t.Fatalf("testenv: start postgres: %v", err)
	}
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
	c    *pgCluster
	url  string
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
		pgState.c, pgState.err = startCluster()
		if pgState.err == nil {
			pgState.url = pgState.c.adminURL()
		}
	})
	if pgState.err != nil {
		unavailable(t, "no PostgreSQL: %v\n%s", pgState.err, pgHowTo)
	}
	return pgState.url
}

type pgCluster struct {
	mu      sync.Mutex
	dir     string // temp root, removed at teardown
	data    string
	sock    string
	logFile string
	pgCtl   string
	port    int
	runAs   string // "postgres" when we are root, else ""
	running bool
}

func (c *pgCluster) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// command runs a PostgreSQL binary, as the postgres user when we are root
// (initdb and postgres refuse to run as root).
func (c *pgCluster) command(bin string, args ...string) *exec.Cmd {
	if c.runAs != "" {
		return exec.Command("runuser", append([]string{"-u", c.runAs, "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func findPGBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var cands []string
	for _, pat := range []string{"/usr/lib/postgresql/*/bin/" + name, "/usr/pgsql-*/bin/" + name, "/usr/local/pgsql/bin/" + name} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin", name)
	}
	sort.Strings(cands)
	return cands[len(cands)-1], nil
}

func startCluster() (*pgCluster, error) {
	pgCtl, err := findPGBin("pg_ctl")
	if err != nil {
		return nil, err
	}
	initdb := filepath.Join(filepath.Dir(pgCtl), "initdb")
	if _, err := os.Stat(initdb); err != nil {
		if initdb, err = findPGBin("initdb"); err != nil {
			return nil, err
		}
	}

	c := &pgCluster{pgCtl: pgCtl}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
		if _, err := user.Lookup(c.runAs); err != nil {
			return nil, fmt.Errorf("running as root and there is no %q system user to run PostgreSQL as: %w", c.runAs, err)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root and runuser(1) is missing")
		}
	}

	dir, err := os.MkdirTemp("", "causet-pg-")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	c.data = filepath.Join(dir, "data")
	c.sock = filepath.Join(dir, "sock")
	c.logFile = filepath.Join(dir, "postgres.log")
	if err := os.Mkdir(c.sock, 0o700); err != nil {
		return nil, err
	}
	if c.runAs != "" {
		if out, err := exec.Command("chown", "-R", c.runAs+":", dir).CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("chown %s: %v: %s", dir, err, out)
		}
	}

	// From here on the cluster may exist: register cleanup, and a watchdog in
	// case this process dies without running Main's teardown.
	stopWatchdog := watchdog(c.shellStop() + "; rm -rf " + shellQuote(dir))
	onTeardown(func() {
		_ = c.stop()
		_ = os.RemoveAll(dir)
		stopWatchdog()
	})

	out, err := c.command(initdb, "-D", c.data, "--auth=trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}

	var lastErr error
	for range 3 { // a free port can be taken between probe and bind: retry
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		if lastErr = c.start(); lastErr == nil {
			return c, nil
		}
	}
	return nil, lastErr
}

func (c *pgCluster) shellStop() string {
	cmd := c.command(c.pgCtl, "stop", "-D", c.data, "-m", "immediate", "-w", "-s")
	q := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ") + " >/dev/null 2>&1"
}

func (c *pgCluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return nil
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=32MB",
		c.port, c.sock)
	out, err := c.command(c.pgCtl, "start", "-D", c.data, "-w", "-t", "60", "-s", "-l", c.logFile, "-o", opts).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start on 127.0.0.1:%d: %v: %s\n--- %s (tail) ---\n%s", c.port, err, out, c.logFile, tail(c.logFile, 20))
	}
	c.running = true
	// pg_ctl -w waited for "ready"; confirm over TCP, which is what tests use.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = adminExec(ctx, c.adminURL(), "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on 127.0.0.1:%d not accepting connections: %w", c.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *pgCluster) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil
	}
	out, err := c.command(c.pgCtl, "stop", "-D", c.data, "-m", "immediate", "-w", "-s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, out)
	}
	c.running = false
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct free ports on 127.0.0.1 (all held open at
// once while probing, so they differ).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		_, p, _ := net.SplitHostPort(l.Addr().String())
		port, _ := strconv.Atoi(p)
		ports = append(ports, port)
	}
	return ports, nil
}
