package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "causet-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "causet")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		panic("build causet: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs causet with only the given environment.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return o.String(), e.String(), code
}

func TestWorkerRefusesBadEnv(t *testing.T) {
	tests := []struct {
		env  string
		want string
	}{
		{"PROJECTION_WORKER_MAX_RETRIES=abc", `PROJECTION_WORKER_MAX_RETRIES="abc" is invalid: want an integer from 1 to 100`},
		{"PROJECTION_WORKER_MAX_RETRIES=0", `PROJECTION_WORKER_MAX_RETRIES="0" is invalid`},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS=-1", `PROJECTION_WORKER_RETRY_INITIAL_MS="-1" is invalid`},
		{"PROJECTION_WORKER_RETRY_MULTIPLIER=0.5", `PROJECTION_WORKER_RETRY_MULTIPLIER="0.5" is invalid: want a number from 1 to 100`},
		{"PROJECTION_WORKER_RETRY_MAX_MS=10", `PROJECTION_WORKER_RETRY_MAX_MS=10 is invalid: want at least PROJECTION_WORKER_RETRY_INITIAL_MS (1000)`},
		{"CAUSET_BRIDGE_MODE=turbo", `CAUSET_BRIDGE_MODE="turbo" is invalid: want one of inline, workflow`},
	}
	for _, tc := range tests {
		t.Run(tc.env, func(t *testing.T) {
			_, stderr, code := runBinary(t, []string{tc.env, "DATABASE_URL=postgres://u:secret@127.0.0.1:1/db"}, "worker")
			require.Equal(t, 1, code)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "one line: %q", stderr)
			require.Contains(t, lines[0], tc.want)
			require.NotContains(t, stderr, "secret")
		})
	}
}

func TestWorkerNeedsDatabaseURL(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "worker")
	require.Equal(t, 1, code)
	require.Equal(t, "causet: DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db", strings.TrimSpace(stderr))
}

func TestWorkerDatabaseDownNamesHostNotPassword(t *testing.T) {
	_, stderr, code := runBinary(t, []string{"DATABASE_URL=postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2"}, "worker")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "127.0.0.1:1")
	require.NotContains(t, stderr, "hunter2")
	require.Len(t, strings.Split(strings.TrimSpace(stderr), "\n"), 1, "one line: %q", stderr)
}
