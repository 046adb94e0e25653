package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// serverText is a dev server's /metrics, cut to the series the figures use
// and a few that must not count (another namespace, another operation).
func serverText(starts, startSum float64, fast, slow float64, persistCalls, persistSum, creates, createSum float64) string {
	return fmt.Sprintf(`# TYPE service_latency histogram
service_latency_bucket{namespace="default",operation="StartWorkflowExecution",service_name="frontend",le="0.001"} 0
service_latency_bucket{namespace="default",operation="StartWorkflowExecution",service_name="frontend",le="0.005"} %[3]g
service_latency_bucket{namespace="default",operation="StartWorkflowExecution",service_name="frontend",le="0.05"} %[4]g
service_latency_bucket{namespace="default",operation="StartWorkflowExecution",service_name="frontend",le="+Inf"} %[1]g
service_latency_sum{namespace="default",operation="StartWorkflowExecution",service_name="frontend"} %[2]g
service_latency_count{namespace="default",operation="StartWorkflowExecution",service_name="frontend"} %[1]g
service_latency_bucket{namespace="default",operation="StartWorkflowExecution",service_name="history",le="+Inf"} %[1]g
service_latency_sum{namespace="default",operation="StartWorkflowExecution",service_name="history"} %[9]g
service_latency_count{namespace="default",operation="StartWorkflowExecution",service_name="history"} %[1]g
service_latency_bucket{namespace="temporal_system",operation="StartWorkflowExecution",service_name="frontend",le="+Inf"} 7
service_latency_sum{namespace="temporal_system",operation="StartWorkflowExecution",service_name="frontend"} 3
service_latency_count{namespace="temporal_system",operation="StartWorkflowExecution",service_name="frontend"} 7
service_latency_bucket{namespace="default",operation="PollWorkflowTaskQueue",service_name="frontend",le="+Inf"} 5
service_latency_sum{namespace="default",operation="PollWorkflowTaskQueue",service_name="frontend"} 60
service_latency_count{namespace="default",operation="PollWorkflowTaskQueue",service_name="frontend"} 5
# TYPE persistence_latency histogram
persistence_latency_bucket{namespace="default",operation="CreateWorkflowExecution",service_name="history",le="+Inf"} %[7]g
persistence_latency_sum{namespace="default",operation="CreateWorkflowExecution",service_name="history"} %[8]g
persistence_latency_count{namespace="default",operation="CreateWorkflowExecution",service_name="history"} %[7]g
persistence_latency_bucket{operation="UpdateShard",service_name="history",le="+Inf"} %[5]g
persistence_latency_sum{operation="UpdateShard",service_name="history"} %[6]g
persistence_latency_count{operation="UpdateShard",service_name="history"} %[5]g
# TYPE persistence_requests counter
persistence_requests{namespace="default",operation="CreateWorkflowExecution",service_name="history"} 1
persistence_requests{operation="UpdateShard",service_name="history"} 1
`, starts, startSum, fast, slow, persistCalls, persistSum, creates, createSum, startSum/2)
}

func parseServer(t *testing.T, text string) serverCounters {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return countersOf(families, "default")
}

func TestServerFiguresAreDifferences(t *testing.T) {
	// Before: 10 starts. After: 110 starts, of which 60 within 5 ms and 99
	// within 50 ms in the span; 100 creates of 0.2 ms; 300 more persistence
	// calls (the creates among them) taking 0.5 s more.
	before := parseServer(t, serverText(10, 0.05, 10, 10, 50, 1.0, 10, 0.002))
	after := parseServer(t, serverText(110, 1.05, 70, 109, 250, 1.48, 110, 0.022))
	f := before.figures(after, 2.0)
	require.NotNil(t, f)
	require.InDelta(t, 100, f.Starts, 1e-9)
	require.InDelta(t, 10.0, f.StartMeanMs, 1e-9)             // 1 s over 100 starts, not counting temporal_system's
	require.InDelta(t, 5.0, f.HistoryStartMeanMs, 1e-9)       // the history service's half
	require.InDelta(t, 5.0, f.StartP50Ms, 1e-9)               // 60 of 100 within 5 ms
	require.InDelta(t, 50.0, f.StartP99Ms, 1e-9)              // 99 of 100 within 50 ms
	require.InDelta(t, 0.2, f.CreateMeanMs, 1e-9)             // 0.02 s over 100 creates
	require.InDelta(t, 3.0, f.PersistenceCallsPerStart, 1e-9) // 200 UpdateShard + 100 creates
	require.InDelta(t, 5.0, f.PersistenceMsPerStart, 1e-9)    // 0.48 + 0.02 s
	require.InDelta(t, 20.0, f.CPUMsPerStart, 1e-9)           // 2 s of CPU
	require.InDelta(t, 50.0, f.StartsPerCore, 1e-9)

	// A span whose slowest percent is beyond every finite bucket says so.
	slow := parseServer(t, serverText(110, 1.05, 70, 80, 250, 1.48, 110, 0.022))
	require.InDelta(t, -1, before.figures(slow, 2.0).StartP99Ms, 0)
	require.Contains(t, before.figures(slow, 2.0).String(), "p99 ≤ ∞ ms")

	// No start in the span: no figures.
	require.Nil(t, after.figures(after, 1.0))
}

func TestServerFiguresOfTheDevServer(t *testing.T) {
	srv := testenv.Temporal(t)
	if srv.MetricsURL == "" {
		t.Skip("bench: the server's own figures need the dev server's metrics endpoint; TEMPORAL_ADDRESS is set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := scrapeServer(ctx, srv.MetricsURL, srv.Namespace)
	require.NoError(t, err)
	queue := testenv.TaskQueue(t)
	const n = 25
	for i := range n {
		_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", queue, i), TaskQueue: queue}, "NobodyRunsThis")
		require.NoError(t, err)
	}
	after, err := scrapeServer(ctx, srv.MetricsURL, srv.Namespace)
	require.NoError(t, err)
	f := before.figures(after, 0.5)
	require.NotNil(t, f, "the dev server counted no start")
	require.InDelta(t, n, f.Starts, 0, "starts the server counted")
	require.Greater(t, f.StartMeanMs, 0.0)
	require.Greater(t, f.StartP50Ms, 0.0)
	require.True(t, f.StartP99Ms == -1 || f.StartP99Ms >= f.StartP50Ms, "p99 %v below p50 %v", f.StartP99Ms, f.StartP50Ms)
	require.Greater(t, f.HistoryStartMeanMs, 0.0)
	require.Less(t, f.HistoryStartMeanMs, f.StartMeanMs, "the history service's part of a start is within the frontend's")
	require.Greater(t, f.CreateMeanMs, 0.0)
	require.GreaterOrEqual(t, f.PersistenceCallsPerStart, 1.0, "a start writes its execution")
	require.InDelta(t, 20.0, f.CPUMsPerStart, 1e-9) // 0.5 s over 25 starts

	_, err = scrapeServer(ctx, srv.HostPort, srv.Namespace) // the gRPC port is no metrics endpoint
	require.Error(t, err)
}

// A cluster's services each serve their own series; summed, they are what
// one process running every service reports.
func TestServerFiguresSumEveryServicesEndpoint(t *testing.T) {
	serve := func(text string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, text) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	ctx := context.Background()
	whole, err := scrapeServers(ctx, []string{serve(serverText(110, 1.05, 70, 109, 250, 1.48, 110, 0.022))}, "default")
	require.NoError(t, err)
	// The same counts split over two endpoints.
	parts, err := scrapeServers(ctx, []string{serve(serverText(60, 0.55, 40, 59, 150, 0.98, 60, 0.012)),
		serve(serverText(50, 0.5, 30, 50, 100, 0.5, 50, 0.01))}, "default")
	require.NoError(t, err)
	require.InDelta(t, whole.startCount, parts.startCount, 1e-9)
	require.InDelta(t, whole.startSum, parts.startSum, 1e-9)
	require.InDelta(t, whole.persistCalls, parts.persistCalls, 1e-9)
	require.InDelta(t, whole.createSum, parts.createSum, 1e-9)
	for ub, n := range whole.startBuckets {
		require.InDelta(t, n, parts.startBuckets[ub], 1e-9, "bucket %g", ub)
	}
	_, err = scrapeServers(ctx, []string{serve("x"), "http://127.0.0.1:1/metrics"}, "default")
	require.Error(t, err, "an endpoint that does not answer fails the read")
}

func TestExternalTemporalFromEnv(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "history.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644))
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	p, err := externalTemporalFromEnv(env(nil))
	require.NoError(t, err)
	require.Empty(t, p.temporalMetrics, "no endpoints: no server figures")

	p, err = externalTemporalFromEnv(env(map[string]string{
		"CAUSET_BENCH_TEMPORAL_METRICS":  "http://127.0.0.1:17283/metrics, http://127.0.0.1:17284/metrics",
		"CAUSET_BENCH_TEMPORAL_PIDFILES": pidFile,
	}))
	require.NoError(t, err)
	require.Equal(t, []string{"http://127.0.0.1:17283/metrics", "http://127.0.0.1:17284/metrics"}, p.temporalMetrics)
	require.Equal(t, []int{os.Getpid()}, p.temporalPIDs)

	for name, kv := range map[string]map[string]string{
		"not a URL":          {"CAUSET_BENCH_TEMPORAL_METRICS": "127.0.0.1:17283"},
		"no pid file":        {"CAUSET_BENCH_TEMPORAL_PIDFILES": filepath.Join(dir, "none.pid")},
		"not a PID":          {"CAUSET_BENCH_TEMPORAL_PIDFILES": writeFile(t, dir, "bad.pid", "frontend")},
		"no running cluster": {"CAUSET_BENCH_TEMPORAL_PGDATA": dir},
	} {
		_, err := externalTemporalFromEnv(env(kv))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "CAUSET_BENCH_TEMPORAL_", name)
	}
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}
