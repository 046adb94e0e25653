package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestRelayRefusesBadEnv(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"CAUSET_RELAY_BATCH=abc", `causet: CAUSET_RELAY_BATCH="abc" is invalid: want an integer from 1 to 10000 (rows per batch)`},
		{"CAUSET_RELAY_POLL_INTERVAL=fast", `causet: CAUSET_RELAY_POLL_INTERVAL="fast" is invalid: want a Go duration from 1ms to 1m, such as 100ms or 1s`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			_, stderr, code := runBinary(t, []string{tc.env, "DATABASE_URL=postgres://u:secret@127.0.0.1:1/db"}, "relay")
			require.Equal(t, 1, code)
			require.Equal(t, tc.want, strings.TrimSpace(stderr))
		})
	}
	_, stderr, code := runBinary(t, nil, "relay")
	require.Equal(t, 1, code)
	require.Equal(t, "causet: DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db", strings.TrimSpace(stderr))
}

// relayTable holds the columns of causet_events the relay reads and writes;
// package ledger owns the whole schema.
// TestRelayKafkaCommand runs `causet relay` on a ledger table with three
// events: they reach the topic, /metrics shows them published, SIGTERM
// stops it cleanly.
func TestRelayKafkaCommand(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for i := 1; i <= 3; i++ {
		env := fmt.Sprintf(`{"eventId":"in-%d:1","eventType":"ITEM_ADDED","entityId":"cart-%d","forkId":"main","intentId":"in-%d","sequence":1,"payload":{"n":%d}}`, i, i, i, i)
		_, err := conn.Exec(ctx, `INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response)
VALUES ($1, 'AddItem', $2, 'main', 'succeeded', 1, '{}')`, fmt.Sprintf("in-%d", i), fmt.Sprintf("cart-%d", i))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope)
VALUES ($1, 'main', $2, 1, 'ITEM_ADDED', $3, $4)`, fmt.Sprintf("in-%d:1", i), fmt.Sprintf("cart-%d", i), fmt.Sprintf("in-%d", i), env)
		require.NoError(t, err)
	}
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)
	metricsAddr := freeAddr(t)

	cmd := exec.Command(binary, "relay")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"DATABASE_URL=" + dbURL, "KAFKA_BROKERS=" + strings.Join(brokers, ","), "CAUSET_EVENTS_TOPIC=" + topic,
		"CAUSET_METRICS_ADDR=" + metricsAddr, "CAUSET_RELAY_BATCH=2", "CAUSET_RELAY_POLL_INTERVAL=10ms"}
	var stderr testenv.LogBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	require.Eventually(t, func() bool {
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM causet_events WHERE published_at IS NULL`).Scan(&n) == nil && n == 0
	}, 30*time.Second, 20*time.Millisecond, "every event published; stderr:\n%s", &stderr)
	ends := testenv.EndOffsets(t, brokers, topic)
	require.Equal(t, int64(3), ends[0]+ends[1]+ends[2])

	var metrics string
	require.Eventually(t, func() bool {
		metrics = get(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(metrics, "causet_relay_published_total 3")
	}, 10*time.Second, 20*time.Millisecond, "metrics:\n%s", metrics)
	require.Contains(t, metrics, "causet_relay_lag_events 0")
	require.Contains(t, metrics, "causet_relay_batch_failures_total 0")
	require.Contains(t, metrics, "causet_relay_kafka_", "the producer's own metrics")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "stderr:\n%s", &stderr)
	case <-time.After(15 * time.Second):
		t.Fatalf("causet relay did not stop within 15s of SIGTERM; stderr:\n%s", &stderr)
	}
	require.Contains(t, stderr.String(), `"msg":"relay stopped"`)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
