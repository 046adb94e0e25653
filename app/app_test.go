package app_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

func TestOpenNeedsDatabaseURL(t *testing.T) {
	_, err := app.Open(context.Background(), load(t, nil), app.WithLogger(quiet()))
	require.EqualError(t, err, "DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db")
}

func TestOpenBadDatabaseURLHidesIt(t *testing.T) {
	_, err := app.Open(context.Background(), load(t, map[string]string{"DATABASE_URL": "postgres://u:hunter2@[::1"}), app.WithLogger(quiet()))
	require.EqualError(t, err, "DATABASE_URL is not a valid PostgreSQL URL")
}

// TestServiceKafka opens the service on a dev server of the test's, runs the
// worker and the bridge it builds, and serves its metrics.
func TestServiceKafka(t *testing.T) {
	srv := testenv.Temporal(t)
	env, topic, dlqTopic := consumerEnv(t, testenv.Kafka(t), map[string]string{"CAUSET_METRICS_ADDR": freeAddr(t)})
	cfg := load(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	setupRan := false
	svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()), app.WithTemporalAddress(srv.HostPort),
		app.WithSetup(func(ctx context.Context, pool *pgxpool.Pool) error {
			setupRan = true
			return pool.Ping(ctx)
		}))
	require.NoError(t, err)
	defer svc.Close()
	require.True(t, setupRan, "setup runs on the pool")
	require.Equal(t, srv.HostPort, svc.Temporal.HostPort)
	require.Equal(t, "default", svc.Temporal.Namespace)
	require.NoError(t, svc.Temporal.Probe(ctx))

	opts, err := svc.BridgeOptions()
	require.NoError(t, err)
	require.Equal(t, topic, opts.Topic)
	require.Equal(t, dlqTopic, opts.DLQTopic)
	require.Equal(t, cfg.TaskQueue, opts.TaskQueue)
	require.NoError(t, opts.Probe(ctx), "the PostgreSQL probe pings the pool")
	require.NoError(t, opts.TemporalProbe(ctx), "the Temporal probe is the health check")
	require.NotEmpty(t, opts.KafkaOptions, "the Kafka client's metrics hook")

	p1, err := svc.DLQProducer()
	require.NoError(t, err)
	w, err := svc.NewWorker()
	require.NoError(t, err)
	p2, err := svc.DLQProducer()
	require.NoError(t, err)
	require.Same(t, p1, p2, "one DLQ producer")
	require.NoError(t, w.Start())
	defer w.Stop()

	stopBridge, done := runBridge(t, ctx, svc)

	stopMetrics, err := svc.ServeMetrics()
	require.NoError(t, err)
	defer stopMetrics()
	resp, err := http.Get("http://" + cfg.MetricsAddr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "go_goroutines")
	require.Contains(t, string(body), "causet_bridge_")

	stopBridge()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("bridge did not stop")
	}
	w.Stop()
	svc.Close()
	svc.Close() // idempotent
}

// TestOpenTemporalFromEnv dials TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE,
// read with Temporal's envconfig.
func TestOpenTemporalFromEnv(t *testing.T) {
	srv := testenv.Temporal(t)
	t.Setenv("TEMPORAL_ADDRESS", srv.HostPort)
	t.Setenv("TEMPORAL_NAMESPACE", srv.Namespace)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := app.Open(ctx, load(t, map[string]string{"DATABASE_URL": testenv.PostgresURL(t)}), app.WithLogger(quiet()))
	require.NoError(t, err)
	defer svc.Close()
	require.Equal(t, srv.HostPort, svc.Temporal.HostPort)
	require.Equal(t, srv.Namespace, svc.Temporal.Namespace)
}

func TestDialTemporalUnreachableNamesAddress(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := app.DialTemporal(ctx, quiet(), app.TemporalOptions{HostPort: addr})
	require.ErrorContains(t, err, "connect to Temporal at "+addr+": ")
}

// A process of this release refuses to start while an ordering lane of the
// previous release is open, naming the procedure, and starts once none is.
func TestOpenRefusesWhileLanesOfThePreviousReleaseAreOpen(t *testing.T) {
	srv := testenv.Temporal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := "projection-lane:p:production:" + testenv.TaskQueue(t)
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: testenv.TaskQueue(t)}, contract.LaneWorkflowName)
	require.NoError(t, err)
	terminated := false
	t.Cleanup(func() {
		if !terminated {
			_ = srv.Client.TerminateWorkflow(context.Background(), id, "", "test over")
		}
	})
	t.Setenv("TEMPORAL_ADDRESS", srv.HostPort)
	t.Setenv("TEMPORAL_NAMESPACE", srv.Namespace)
	cfg := load(t, map[string]string{"DATABASE_URL": testenv.PostgresURL(t)})
	require.Eventually(t, func() bool {
		svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()))
		if err == nil {
			svc.Close()
			return false
		}
		require.Contains(t, err.Error(), "ordering lanes (ProjectionLaneWorkflow) of the previous release are still open")
		require.Contains(t, err.Error(), "docs/UPGRADES.md")
		return true
	}, 30*time.Second, 200*time.Millisecond)

	require.NoError(t, srv.Client.TerminateWorkflow(ctx, id, "", "the previous release's lane finished"))
	terminated = true
	require.Eventually(t, func() bool {
		svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()))
		if err != nil {
			return false
		}
		svc.Close()
		return true
	}, 30*time.Second, 200*time.Millisecond)
}
