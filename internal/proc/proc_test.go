package proc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/proc/proctest"
)

func needTools(t *testing.T, postgres, temporal bool) {
	t.Helper()
	var err error
	if postgres { // system binaries, or fetched ones (see PostgresBinariesEnv)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, err = PostgresBinDir(ctx)
	}
	if err == nil && temporal {
		_, err = FindTemporalCLI()
	}
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("proc: %v", err)
		}
		t.Skipf("proc: %v", err)
	}
}

func requireGone(t *testing.T, root string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if len(proctest.Mentioning(root)) > 0 {
			return false
		}
		left, err := os.ReadDir(root)
		return err == nil && len(left) == 0
	}, 20*time.Second, 100*time.Millisecond, "processes or temp dirs left under %s", root)
}

func TestPostgresHaltResume(t *testing.T) {
	needTools(t, true, false)
	root := proctest.TempRoot(t, "causet-proc-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := StartPostgres(ctx, PostgresOptions{MaxConnections: 42})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Stop() })
	require.True(t, strings.HasPrefix(filepath.Base(p.Dir), "causet-pg-"))

	conn, err := pgx.Connect(ctx, p.URL)
	require.NoError(t, err)
	var maxConns string
	require.NoError(t, conn.QueryRow(ctx, "SHOW max_connections").Scan(&maxConns))
	require.Equal(t, "42", maxConns)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (id int)")
	require.NoError(t, err)

	require.NoError(t, p.Halt())
	require.NoError(t, p.Halt(), "Halt is a no-op when halted")
	require.Error(t, conn.Ping(ctx), "connections are cut")
	_, err = pgx.Connect(ctx, p.URL)
	require.Error(t, err, "new connections are refused")

	port := p.Port
	require.NoError(t, p.Resume(ctx))
	require.NoError(t, p.Resume(ctx), "Resume is a no-op when running")
	require.Equal(t, port, p.Port)
	conn, err = pgx.Connect(ctx, p.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT * FROM kept")
	require.NoError(t, err, "data survives Halt/Resume")
	_ = conn.Close(ctx)

	require.NoError(t, p.Halt())
	require.NoError(t, p.Stop(), "Stop works on a halted cluster")
	require.NoError(t, p.Stop(), "Stop is idempotent")
	requireGone(t, root)
}

func TestTemporalHaltResume(t *testing.T) {
	needTools(t, false, true)
	root := proctest.TempRoot(t, "causet-proc-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tp, err := StartTemporal(ctx, TemporalOptions{Headless: true})
	require.NoError(t, err)
	t.Cleanup(tp.Stop)
	require.Empty(t, tp.UIURL)
	require.True(t, strings.HasPrefix(filepath.Base(tp.Dir), "causet-temporal-"))
	first := tp.PID

	tp.Halt()
	tp.Halt() // no-op
	require.False(t, proctest.Alive(first))
	require.Error(t, tp.healthy(ctx))

	require.NoError(t, tp.Resume(ctx))
	require.NoError(t, tp.Resume(ctx), "Resume is a no-op when running")
	require.NotEqual(t, first, tp.PID)
	require.NoError(t, tp.healthy(ctx), "same address, search attributes registered again")

	second := tp.PID
	tp.Stop()
	tp.Stop() // idempotent
	require.False(t, proctest.Alive(second))
	requireGone(t, root)
}

// TestWatchdog starts a cluster and a dev server in a child process, kills
// the child with SIGKILL and checks that the watchdogs stop both and remove
// their temp dirs.
func TestWatchdog(t *testing.T) {
	needTools(t, true, true)
	root := proctest.TempRoot(t, "causet-proc-test-")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogChild$", "-test.v")
	cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=1", "TMPDIR="+root)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "READY") {
				ready <- line
			}
		}
		close(ready)
	}()
	var line string
	select {
	case line = <-ready:
	case <-time.After(3 * time.Minute):
		t.Fatal("child did not start the services")
	}
	require.NotEmpty(t, line, "child exited without starting the services")
	var pgPID, tPID int
	_, err = fmt.Sscanf(line, "READY %d %d", &pgPID, &tPID)
	require.NoError(t, err)
	require.True(t, proctest.Alive(pgPID))
	require.True(t, proctest.Alive(tPID))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !proctest.Alive(pgPID) && !proctest.Alive(tPID) }, 30*time.Second, 100*time.Millisecond)
	requireGone(t, root)
}

// TestWatchdogChild is the child of TestWatchdog: it starts the services,
// halts and resumes Temporal (so the watchdog must follow the new process),
// prints their PIDs and waits to be killed.
func TestWatchdogChild(t *testing.T) {
	if os.Getenv("PROC_TEST_CHILD") != "1" {
		t.Skip("child of TestWatchdog")
	}
	ctx := context.Background()
	p, err := StartPostgres(ctx, PostgresOptions{})
	require.NoError(t, err)
	tp, err := StartTemporal(ctx, TemporalOptions{Headless: true})
	require.NoError(t, err)
	tp.Halt()
	require.NoError(t, tp.Resume(ctx))
	b, err := os.ReadFile(filepath.Join(p.Dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pgPID, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	fmt.Printf("READY %d %d\n", pgPID, tp.PID)
	time.Sleep(10 * time.Minute)
}
