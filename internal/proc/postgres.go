package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/causet/projection-retry/internal/backoff"
	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres is wrapped by the error StartPostgres returns when the
// PostgreSQL server binaries (pg_ctl, initdb) can be neither found nor
// fetched.
var ErrNoPostgres = errors.New("PostgreSQL server binaries not found")

// PostgresOptions configure StartPostgres.
type PostgresOptions struct {
	// MaxConnections is the server's max_connections. Optional, defaults to 200.
	MaxConnections int
	// TempDirPrefix names the temp dir (os.MkdirTemp pattern prefix).
	// Optional, defaults to "causet-pg-".
	TempDirPrefix string
}

// Postgres is a throwaway PostgreSQL cluster in a temp dir, listening on
// 127.0.0.1 with trust authentication. Halt and Resume take it down and bring
// it back on the same port with the same data; Stop ends it for good. Its
// methods are safe for concurrent use.
type Postgres struct {
	// URL is the connection URL of the cluster's "postgres" database.
	URL string
	// Dir is the temp dir holding the data directory ("data"), socket and
	// log; Stop removes it.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int

	data, sock, logFile, pgCtl, runAs string
	maxConns                          int

	mu           sync.Mutex // serialises start, Halt, Resume and Stop
	running      bool
	stopWatchdog func()
	stopOnce     sync.Once
	stopErr      error
}

// FindPGBin finds a PostgreSQL server binary on PATH or in the usual
// distribution directories (newest version first). The error wraps
// ErrNoPostgres.
func FindPGBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var cands []string
	for _, pat := range []string{"/usr/lib/postgresql/*/bin/" + name, "/usr/pgsql-*/bin/" + name, "/usr/local/pgsql/bin/" + name} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin: %w", name, ErrNoPostgres)
	}
	sort.Strings(cands)
	return cands[len(cands)-1], nil
}

// serverUser is the user a root process runs PostgreSQL as: "postgres",
// which the distribution packages create, or else "nobody" (a machine
// without those packages, using fetched binaries).
func serverUser(lookup func(string) (*user.User, error)) (string, error) {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := lookup(name); err == nil {
			return name, nil
		}
	}
	return "", errors.New(`running as root and there is neither a "postgres" nor a "nobody" system user to run PostgreSQL as (initdb and postgres refuse to run as root)`)
}

// command runs a PostgreSQL binary, as p.runAs (postgres or nobody) when we
// are root (initdb and postgres refuse to run as root).
func (p *Postgres) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	if p.runAs != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs, "--", bin}, args...)...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// StartPostgres initialises a cluster in a new temp dir, starts it with
// pg_ctl on a free 127.0.0.1 port and waits until it accepts TCP
// connections. The binaries are the system's, or fetched ones when there are
// none (see [PostgresBinariesEnv]). When running as root, the server runs as
// the "postgres" system user (or "nobody" when there is none). On error
// nothing is left behind.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 200
	}
	if opts.TempDirPrefix == "" {
		opts.TempDirPrefix = "causet-pg-"
	}
	bins, err := postgresBinaries(ctx)
	if err != nil {
		return nil, err
	}
	initdb := bins.initdb
	p := &Postgres{pgCtl: bins.pgCtl, maxConns: opts.MaxConnections, stopWatchdog: func() {}}
	if os.Geteuid() == 0 {
		if p.runAs, err = serverUser(user.Lookup); err != nil {
			return nil, err
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root and runuser(1) is missing")
		}
	}
	dir, err := os.MkdirTemp("", opts.TempDirPrefix)
	if err != nil {
		return nil, err
	}
	p.Dir = dir
	p.data = filepath.Join(dir, "data")
	p.sock = filepath.Join(dir, "sock")
	p.logFile = filepath.Join(dir, "postgres.log")
	ok := false
	defer func() {
		if !ok {
			_ = p.Stop()
		}
	}()
	if err := os.Mkdir(p.sock, 0o700); err != nil {
		return nil, err
	}
	if p.runAs != "" {
		if out, err := exec.CommandContext(ctx, "chown", "-R", p.runAs+":", dir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chown %s: %v: %s", dir, err, out)
		}
	}
	// From here on a server may exist: stop it if this process dies. The
	// data dir is removed anyway, so an immediate stop is enough.
	p.stopWatchdog = watchdog(p.shellStop() + "; rm -rf " + shellQuote(dir))

	out, err := p.command(ctx, initdb, "-D", p.data, "--auth=trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var lastErr error
	for range 3 { // a probed free port can be taken before the server binds it
		ports, err := FreePorts(1)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.Port = ports[0]
		lastErr = p.startLocked(ctx)
		p.mu.Unlock()
		if lastErr == nil {
			p.URL = p.url()
			ok = true
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

func (p *Postgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
}

// startLocked starts the server on p.Port (no-op if running) and waits until
// it accepts TCP connections. p.mu is held.
func (p *Postgres) startLocked(ctx context.Context) error {
	if p.running {
		return nil
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=%d -c shared_buffers=32MB", p.Port, p.sock, p.maxConns)
	out, err := p.command(ctx, p.pgCtl, "start", "-D", p.data, "-w", "-t", "60", "-s", "-l", p.logFile, "-o", opts).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start on 127.0.0.1:%d: %v: %s\n--- %s (tail) ---\n%s", p.Port, err, strings.TrimSpace(string(out)), p.logFile, tail(p.logFile, 20))
	}
	p.running = true
	// pg_ctl -w waited for "ready"; confirm over TCP, which is what clients use.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, p.url())
		if err == nil {
			_ = conn.Close(cctx)
			cancel()
			return nil
		}
		cancel()
		if time.Now().After(deadline) || backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("postgres on 127.0.0.1:%d not accepting connections: %w", p.Port, err)
		}
	}
}

func (p *Postgres) shellStop() string {
	cmd := p.command(context.Background(), p.pgCtl, "stop", "-D", p.data, "-m", "immediate", "-w", "-s")
	q := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ") + " >/dev/null 2>&1"
}

// Halt stops the server abruptly (pg_ctl stop -m immediate: open connections
// are cut, new ones are refused) and keeps the data dir, so Resume can bring
// it back. It is a no-op when the server is not running.
func (p *Postgres) Halt() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := p.command(ctx, p.pgCtl, "stop", "-D", p.data, "-m", "immediate", "-w", "-s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, strings.TrimSpace(string(out)))
	}
	p.running = false
	return nil
}

// Resume starts a server stopped by Halt again, on the same port with the
// same data, and waits until it accepts connections. It is a no-op when the
// server is running.
func (p *Postgres) Resume(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked(ctx)
}

// Stop stops the server (pg_ctl stop -m fast, then immediate) and removes the
// temp dir. It is idempotent and safe on a partly started or halted cluster.
func (p *Postgres) Stop() error {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, err := os.Stat(filepath.Join(p.data, "postmaster.pid")); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := p.command(ctx, p.pgCtl, "stop", "-D", p.data, "-m", "fast", "-w", "-s", "-t", "20").CombinedOutput()
			if err != nil {
				out2, err2 := p.command(ctx, p.pgCtl, "stop", "-D", p.data, "-m", "immediate", "-w", "-s").CombinedOutput()
				if err2 != nil {
					p.stopErr = fmt.Errorf("pg_ctl stop: %v: %s; %v: %s", err, out, err2, out2)
				}
			}
			cancel()
		}
		p.running = false
		p.stopWatchdog()
		if p.Dir != "" {
			if err := os.RemoveAll(p.Dir); err != nil && p.stopErr == nil {
				p.stopErr = err
			}
		}
	})
	return p.stopErr
}
