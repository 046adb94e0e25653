package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/client"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/relay"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestWritePathKafka opens the service WithWritePathOnly (no Temporal at
// all), serves the runtime it builds, submits an intent with the client,
// and checks that the relay it builds publishes the intent's event to the
// events topic; the free ServeMetrics serves the shared registry.
func TestWritePathKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 1)
	rtAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg := load(t, map[string]string{
		"DATABASE_URL":        testenv.PostgresURL(t),
		"KAFKA_BROKERS":       strings.Join(brokers, ","),
		"CAUSET_EVENTS_TOPIC": topic,
		"CAUSET_METRICS_ADDR": metricsAddr,
	})
	// Nothing listens here: the write path must not dial Temporal.
	t.Setenv("TEMPORAL_ADDRESS", freeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()), app.WithWritePathOnly())
	require.NoError(t, err)
	defer svc.Close()
	require.Nil(t, svc.Temporal)
	require.Nil(t, svc.Engine)
	_, err = svc.NewWorker()
	require.ErrorContains(t, err, "WithWritePathOnly")
	_, err = svc.NewBridge()
	require.ErrorContains(t, err, "WithWritePathOnly")

	raw, err := exampleintents.Document("PlayTrack")
	require.NoError(t, err)
	doc, err := intents.Parse(raw)
	require.NoError(t, err)
	_, err = intents.Deploy(ctx, svc.Pool, doc)
	require.NoError(t, err)

	rt, err := svc.NewRuntime(ctx, app.RuntimeOptions{Addr: rtAddr})
	require.NoError(t, err)
	require.Equal(t, rtAddr, rt.Addr)
	require.Equal(t, []string{"PlayTrack"}, rt.Catalog.IntentTypes())
	r, err := svc.NewRelay(relay.Settings{Batch: 10, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	stopMetrics, err := app.ServeMetrics(cfg.MetricsAddr, svc.Registry, quiet())
	require.NoError(t, err)
	defer stopMetrics()
	_, err = app.ServeMetrics(cfg.MetricsAddr, svc.Registry, quiet())
	require.ErrorContains(t, err, "CAUSET_METRICS_ADDR="+metricsAddr+": ")

	runCtx, stop := context.WithCancel(ctx)
	rtDone, relayDone := make(chan error, 1), make(chan error, 1)
	go func() { rtDone <- rt.Run(runCtx) }()
	go func() { relayDone <- r.Run(runCtx) }()

	cl := client.New("http://" + rtAddr)
	res, err := cl.Submit(ctx, client.Intent{IntentID: "play-1", IntentType: "PlayTrack", EntityID: "listener-1", ForkID: "production",
		Payload: map[string]any{"artistId": "artist-1", "trackId": "track-1", "plays": 3, "days": 1}})
	require.NoError(t, err)
	require.Equal(t, client.ResultSuccess, res.Status)
	require.Len(t, res.Events, 1)
	require.Equal(t, "play-1:1", res.Events[0].EventID)
	res, err = cl.Submit(ctx, client.Intent{IntentID: "play-2", IntentType: "PlayTrack", EntityID: "listener-1", ForkID: "production",
		Payload: map[string]any{"artistId": "artist-1", "trackId": "track-1", "plays": 3, "days": 0}})
	require.NoError(t, err)
	require.Equal(t, client.ResultRejected, res.Status)
	require.Equal(t, "days_positive", res.Rule)

	// The relay publishes the event, keyed by entity.
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	var rec *kgo.Record
	for rec == nil {
		fs := cons.PollFetches(fctx)
		require.NoError(t, fctx.Err(), "no event on %s", topic)
		fs.EachRecord(func(r *kgo.Record) { rec = r })
	}
	require.Equal(t, "listener-1", string(rec.Key))
	var env map[string]any
	require.NoError(t, json.Unmarshal(rec.Value, &env))
	require.Equal(t, "play-1:1", env["eventId"])
	require.Equal(t, "TRACK_PLAYED", env["eventType"])

	// One registry: the runtime's and the relay's metrics, on the metrics
	// server and the runtime's own /metrics.
	require.Eventually(t, func() bool {
		_, m := httpGet(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(m, "causet_relay_published_total 1")
	}, 10*time.Second, 20*time.Millisecond)
	code, _ := httpGet(t, "http://"+rtAddr+"/metrics")
	require.Equal(t, http.StatusNotFound, code, "the API's listener serves no metrics")
	for _, url := range []string{"http://" + metricsAddr + "/metrics"} {
		code, m := httpGet(t, url)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, m, `causet_runtime_intents_total{status="success"} 1`, url)
		require.Contains(t, m, `causet_runtime_intents_total{status="rejected"} 1`, url)
		require.Contains(t, m, "causet_relay_kafka_", url)
		require.Contains(t, m, "go_goroutines", url)
	}

	stop()
	for name, done := range map[string]chan error{"runtime": rtDone, "relay": relayDone} {
		select {
		case err := <-done:
			require.NoError(t, err, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", name)
		}
	}
	_, err = http.Get("http://" + rtAddr + "/healthz")
	require.Error(t, err, "the runtime no longer listens")
}

// TestOpenDatabaseDownNamesHostNotPassword: a process's start fails on one
// line naming PostgreSQL's host, never the password.
func TestOpenDatabaseDownNamesHostNotPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := app.Open(ctx, load(t, map[string]string{"DATABASE_URL": "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2"}),
		app.WithLogger(quiet()), app.WithWritePathOnly())
	require.ErrorContains(t, err, "DATABASE_URL: cannot reach PostgreSQL at 127.0.0.1:1: ")
	require.NotContains(t, err.Error(), "hunter2")
}
