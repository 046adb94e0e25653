package devstack

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

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL cluster in a temp dir, listening on
// 127.0.0.1 with trust authentication. Stop it with Stop.
type Postgres struct {
	// URL is the connection URL of the cluster's "postgres" database.
	URL string
	// Dir is the temp dir holding the data directory, socket and log; Stop
	// removes it.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int

	data, sock, logFile, pgCtl, runAs string
	stopWatchdog                      func()
	stopOnce                          sync.Once
	stopErr                           error
}

// findPGBin finds a PostgreSQL server binary on PATH or in the usual
// distribution directories (newest version first).
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
		return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin: install the PostgreSQL server binaries or set DATABASE_URL", name)
	}
	sort.Strings(cands)
	return cands[len(cands)-1], nil
}

// command runs a PostgreSQL binary, as the postgres user when we are root
// (initdb and postgres refuse to run as root).
func (p *Postgres) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	if p.runAs != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs, "--", bin}, args...)...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// StartPostgres initialises a cluster in a new temp dir (causet-dev-pg-*),
// starts it with pg_ctl on a free 127.0.0.1 port and waits until it accepts
// TCP connections. When running as root, the server runs as the "postgres"
// system user. On error nothing is left behind.
func StartPostgres(ctx context.Context) (*Postgres, error) {
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
	p := &Postgres{pgCtl: pgCtl, stopWatchdog: func() {}}
	if os.Geteuid() == 0 {
		p.runAs = "postgres"
		if _, err := user.Lookup(p.runAs); err != nil {
			return nil, fmt.Errorf("running as root and there is no %q system user to run PostgreSQL as: %w", p.runAs, err)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root and runuser(1) is missing")
		}
	}
	dir, err := os.MkdirTemp("", "causet-dev-pg-")
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
	// From here on a server may exist: stop it if this process dies.
	p.stopWatchdog = watchdog(p.shellStop() + "; rm -rf " + shellQuote(dir))

	out, err := p.command(ctx, initdb, "-D", p.data, "--auth=trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var lastErr error
	for range 3 { // a probed free port can be taken before the server binds it
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		p.Port = ports[0]
		if lastErr = p.start(ctx); lastErr == nil {
			ok = true
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

func (p *Postgres) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=32MB", p.Port, p.sock)
	out, err := p.command(ctx, p.pgCtl, "start", "-D", p.data, "-w", "-t", "60", "-s", "-l", p.logFile, "-o", opts).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start on 127.0.0.1:%d: %v: %s\n--- %s (tail) ---\n%s", p.Port, err, strings.TrimSpace(string(out)), p.logFile, tail(p.logFile, 20))
	}
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, p.URL)
		if err == nil {
			_ = conn.Close(cctx)
			cancel()
			return nil
		}
		cancel()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("postgres on 127.0.0.1:%d not accepting connections: %w", p.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *Postgres) shellStop() string {
	cmd := p.command(context.Background(), p.pgCtl, "stop", "-D", p.data, "-m", "fast", "-w", "-s")
	q := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ") + " >/dev/null 2>&1"
}

// Stop stops the server (pg_ctl stop -m fast, then immediate) and removes the
// temp dir. It is idempotent and safe on a partly started cluster.
func (p *Postgres) Stop() error {
	p.stopOnce.Do(func() {
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
		p.stopWatchdog()
		if p.Dir != "" {
			if err := os.RemoveAll(p.Dir); err != nil && p.stopErr == nil {
				p.stopErr = err
			}
		}
	})
	return p.stopErr
}
