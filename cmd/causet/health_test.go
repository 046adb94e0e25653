package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

type readyAnswer struct {
	code   int
	Status string            `json:"status"`
	Reason string            `json:"reason"`
	Checks map[string]string `json:"checks"`
}

// getReady reads /healthz or /readyz; code 0 means no answer.
func getReady(url string) readyAnswer {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return readyAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := readyAnswer{code: resp.StatusCode}
	_ = json.Unmarshal(b, &a)
	return a
}

// TestHealthKafkaCommand runs `causet worker`, `causet bridge` and `causet
// relay`: once up, each answers /healthz and /readyz with 200 on
// CAUSET_METRICS_ADDR (the bridge once it joined its group); with PostgreSQL
// stopped /readyz is 503 naming it while /healthz stays 200; with
// PostgreSQL back they are ready again, and SIGTERM stops them cleanly.
// (StopPostgres stops this test binary's own cluster; no test here runs in
// parallel with another.)
func TestHealthKafkaCommand(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	topic, dlqTopic := testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, topic, 2)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"DATABASE_URL=" + dbURL, "KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"TEMPORAL_ADDRESS=" + srv.HostPort, "TEMPORAL_NAMESPACE=" + srv.Namespace,
		"CAUSET_EVENTS_TOPIC=" + topic, "CAUSET_DLQ_TOPIC=" + dlqTopic,
		"CAUSET_CONSUMER_GROUP=" + testenv.Topic(t, "group"), "CAUSET_TASK_QUEUE=" + testenv.TaskQueue(t)}

	type proc struct {
		name, addr string
		checks     []string
		cmd        *exec.Cmd
		stderr     *testenv.LogBuffer
		exited     chan error
	}
	procs := []*proc{
		{name: "worker", checks: []string{"postgres", "temporal"}},
		{name: "bridge", checks: []string{"postgres", "temporal", "kafka"}},
		{name: "relay", checks: []string{"postgres"}},
	}
	for _, p := range procs {
		p.addr = freeAddr(t)
		p.cmd = exec.Command(binary, p.name)
		p.cmd.Env = append(append([]string{}, env...), "CAUSET_METRICS_ADDR="+p.addr)
		p.stderr = &testenv.LogBuffer{}
		p.cmd.Stderr = p.stderr
		require.NoError(t, p.cmd.Start())
		p.exited = make(chan error, 1)
		go func() { p.exited <- p.cmd.Wait() }()
		t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	}
	// alive fails the test at once if a process exited.
	alive := func(p *proc) {
		select {
		case err := <-p.exited:
			t.Fatalf("causet %s exited: %v; stderr:\n%s", p.name, err, p.stderr)
		default:
		}
	}
	waitReady := func(what string) {
		for _, p := range procs {
			var a readyAnswer
			require.Eventually(t, func() bool {
				alive(p)
				a = getReady("http://" + p.addr + "/readyz")
				return a.code == http.StatusOK
			}, 90*time.Second, 100*time.Millisecond, "%s: causet %s /readyz: %+v; stderr:\n%s", what, p.name, a, p.stderr)
			require.Equal(t, "ready", a.Status)
			require.Len(t, a.Checks, len(p.checks), "causet %s checks %v", p.name, a.Checks)
			for _, c := range p.checks {
				require.Equal(t, "ok", a.Checks[c], "causet %s check %s", p.name, c)
			}
			require.Equal(t, http.StatusOK, getReady("http://"+p.addr+"/healthz").code, "causet %s /healthz", p.name)
		}
	}
	waitReady("once up")

	testenv.StopPostgres(t)
	for _, p := range procs {
		var a readyAnswer
		require.Eventually(t, func() bool {
			alive(p)
			a = getReady("http://" + p.addr + "/readyz")
			return a.code == http.StatusServiceUnavailable
		}, 30*time.Second, 100*time.Millisecond, "causet %s /readyz with PostgreSQL down: %+v", p.name, a)
		t.Logf("%s: %+v", p.name, a)
		require.Equal(t, "not ready", a.Status)
		require.Contains(t, a.Reason, "postgres: PostgreSQL at ", "causet %s names the failing dependency", p.name)
		require.NotEqual(t, "ok", a.Checks["postgres"])
		require.NotContains(t, a.Reason, "\n")
		require.Equal(t, http.StatusOK, getReady("http://"+p.addr+"/healthz").code, "causet %s stays alive", p.name)
	}

	testenv.StartPostgres(t)
	waitReady("PostgreSQL back")

	for _, p := range procs {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range procs {
		select {
		case err := <-p.exited:
			require.NoError(t, err, "causet %s; stderr:\n%s", p.name, p.stderr)
		case <-time.After(60 * time.Second):
			t.Fatalf("causet %s did not stop within 60s of SIGTERM; stderr:\n%s", p.name, p.stderr)
		}
	}
}
