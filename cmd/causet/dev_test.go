package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/internal/testenv"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// liveProcsMentioning returns live processes whose command line contains s.
func liveProcsMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
				continue
			}
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// TestDevKafkaSmoke runs the causet binary's `dev --demo` with no service
// environment set (KAFKA_BROKERS is kept under `make test-kafka`), waits
// until the temporal CLI lists a dead-lettered workflow, then sends SIGINT as
// Ctrl-C does and checks that no child process and no temp dir remain.
func TestDevKafkaSmoke(t *testing.T) {
	cli, err := devstack.FindTemporalCLI()
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	root, err := os.MkdirTemp("", "causet-dev-smoke-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(root, 0o755)) // initdb runs as postgres when root
	t.Cleanup(func() { _ = os.RemoveAll(root) })

	env := []string{"TMPDIR=" + root, "CAUSET_TASK_QUEUE=" + testenv.TaskQueue(t)}
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TMPDIR", "CAUSET_TASK_QUEUE":
		case "KAFKA_BROKERS":
			if testenv.IsRealKafka() {
				env = append(env, kv)
			}
		default:
			env = append(env, kv)
		}
	}
	if testenv.IsRealKafka() {
		env = append(env,
			"CAUSET_EVENTS_TOPIC="+testenv.Topic(t, "causet.events.v1"),
			"CAUSET_DLQ_TOPIC="+testenv.Topic(t, "causet.projection-dlq.v1"),
			"CAUSET_CONSUMER_GROUP="+testenv.Topic(t, "causet-projection-worker"))
	}

	out, logs := &lockedBuffer{}, &lockedBuffer{}
	cmd := exec.Command(binary, "dev", "--demo", "--rate", "10")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out, logs
	// It runs in the package directory and finds ./bin/temporal upwards.
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})

	// The banner names the Temporal address and the dead-letter UI link.
	addrRE := regexp.MustCompile(`Temporal +(127\.0\.0\.1:\d+)`)
	var addr string
	var exited bool
	var exitErr error
	require.Eventually(t, func() bool {
		select {
		case exitErr = <-done:
			exited = true
			return true
		default:
		}
		m := addrRE.FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		addr = m[1]
		return true
	}, 3*time.Minute, 200*time.Millisecond, "no banner:\n%s", out)
	require.False(t, exited, "causet dev returned early: %v\n%s\n%s", exitErr, out, logs)
	banner := out.String()
	require.Contains(t, banner, "/namespaces/default/workflows?query=CausetRetryState%3D%22dead_lettered%22")
	require.Contains(t, banner, `workflow signal`)
	require.Contains(t, banner, `--name replay --input '{"reason":"fixed"}'`)

	// A dead-lettered workflow shows up in the temporal CLI's list.
	var listed string
	require.Eventually(t, func() bool {
		cmd := exec.Command(cli, "workflow", "list", "--address", addr, "--namespace", "default",
			"--query", `CausetRetryState="dead_lettered"`, "-o", "json")
		b, err := cmd.Output()
		if err != nil {
			return false
		}
		var rows []map[string]any
		if json.Unmarshal(b, &rows) != nil || len(rows) == 0 {
			return false
		}
		listed = string(b)
		return true
	}, 90*time.Second, time.Second, "no dead-lettered workflow listed\n%s", out)
	require.Contains(t, listed, "projection-retry:")

	// Ctrl-C.
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case err := <-done:
		require.NoError(t, err, "causet dev exits 0 on Ctrl-C\n%s", logs)
	case <-time.After(90 * time.Second):
		t.Fatal("causet dev did not stop within 90s of Ctrl-C")
	}
	require.Contains(t, out.String(), "stopped everything it started")
	require.Eventually(t, func() bool { return len(liveProcsMentioning(root)) == 0 }, 10*time.Second, 100*time.Millisecond,
		"processes left: %v", liveProcsMentioning(root))
	pidRE := regexp.MustCompile(`"msg":"temporal dev server started".*"pid":(\d+)`)
	m := pidRE.FindStringSubmatch(logs.String())
	require.NotNil(t, m, "temporal pid not logged")
	require.Empty(t, liveProcsMentioning("--port "+strings.Split(addr, ":")[1]+" "), "temporal dev server (pid %s) still running", m[1])
	_, err = os.Stat("/proc/" + m[1])
	require.True(t, os.IsNotExist(err), "temporal dev server pid %s still exists", m[1])
	left, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, left, "temp dirs left behind")
}
