package observability_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/relay"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scrape reads addr's /metrics over HTTP and returns the names a query can
// select: each family's name and, for summaries and histograms, the series
// Prometheus stores for them (_sum, _count, _bucket).
func scrape(t *testing.T, addr string) map[string]bool {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "/metrics of %s", addr)
	out := map[string]bool{}
	for name, mf := range families {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		out[name] = true
		switch mf.GetType() {
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = true, true
		case dto.MetricType_HISTOGRAM:
			out[name+"_sum"], out[name+"_count"], out[name+"_bucket"] = true, true, true
		}
	}
	return out
}

// missing are the wanted metrics none of the scrapes holds.
func missing(want *selectors, scrapes ...map[string]bool) []string {
	have := map[string]bool{}
	for _, s := range scrapes {
		for n := range s {
			have[n] = true
		}
	}
	var out []string
	for name, where := range want.names {
		if !have[name] {
			out = append(out, fmt.Sprintf("%s (%s)", name, strings.Join(slices.Compact(slices.Sorted(slices.Values(where))), "; ")))
		}
	}
	for text, m := range want.patterns {
		found := false
		for n := range have {
			found = found || m.Matches(n)
		}
		if !found {
			out = append(out, text)
		}
	}
	slices.Sort(out)
	return out
}

// TestMetricsExportedKafka runs a worker, a bridge and a relay as `causet
// worker`, `causet bridge` and `causet relay` assemble them (package app),
// each with its own registry and /metrics, and checks that every metric the
// alert rules and the dashboard read is exported by one of them.
//
// A labelled vector (retries by projection, outage pauses by dependency, …)
// has no series until it is first touched, and client_golang then writes no
// # HELP or # TYPE line for it either (Gather leaves out families without
// samples), so neither a scrape nor the registry can show an untouched one.
// The test therefore drives what each of them counts — applied, skipped and
// poison records, an ir_eval and a sql failure retried to their dead
// letters, a later event of a blocked key parked behind it, a replay after
// the fix, a PostgreSQL outage the bridge proves and waits out, encrypted
// payloads — and the scrapes are the evidence. Nothing is exempted.
func TestMetricsExportedKafka(t *testing.T) {
	want := wantedMetrics(t)
	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	dbURL := testenv.PostgresURL(t)
	topic, dlqTopic := testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, topic, 2)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)

	// The payload codec's counters exist only with encryption on; the
	// Temporal client reads TEMPORAL_* as the commands do.
	t.Setenv(config.EnvPayloadKeys, "k1:"+testenv.RandomKey(t, config.PayloadKeySize))
	t.Setenv("TEMPORAL_ADDRESS", srv.HostPort)
	t.Setenv("TEMPORAL_NAMESPACE", srv.Namespace)

	env := map[string]string{
		"DATABASE_URL":          dbURL,
		"KAFKA_BROKERS":         strings.Join(brokers, ","),
		"CAUSET_EVENTS_TOPIC":   topic,
		"CAUSET_DLQ_TOPIC":      dlqTopic,
		"CAUSET_CONSUMER_GROUP": testenv.Topic(t, "group"),
		"CAUSET_TASK_QUEUE":     testenv.TaskQueue(t),
		// Attempt 1 in the bridge, two more in the workflow, 1 s apart.
		"PROJECTION_WORKER_MAX_RETRIES":      "3",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "1",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "1000",
	}
	cfgFor := func() config.Config {
		env["CAUSET_METRICS_ADDR"] = testenv.FreeAddr(t)
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		require.NoError(t, err)
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	setup := app.WithSetup(func(ctx context.Context, pool *pgxpool.Pool) error {
		ddl, err := exampleprojections.DDL("artist_stats")
		if err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, ddl+";"+testenv.FollowersNoFollowedAtDDL); err != nil {
			return err
		}
		for _, name := range []string{"artist_stats", "artist_followers"} {
			raw, err := exampleprojections.Document(name)
			if err != nil {
				return err
			}
			doc, err := projection.Parse(raw)
			if err != nil {
				return err
			}
			if _, err := projection.Deploy(ctx, pool, doc); err != nil {
				return err
			}
		}
		return nil
	})

	// The worker.
	workerCfg := cfgFor()
	ws, err := app.Open(ctx, workerCfg, app.WithLogger(quiet()), setup)
	require.NoError(t, err)
	t.Cleanup(ws.Close)
	w, err := ws.NewWorker()
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	stop, err := ws.ServeMetrics()
	require.NoError(t, err)
	t.Cleanup(stop)

	// The bridge.
	bridgeCfg := cfgFor()
	bs, err := app.Open(ctx, bridgeCfg, app.WithLogger(quiet()))
	require.NoError(t, err)
	t.Cleanup(bs.Close)
	b, err := bs.NewBridge()
	require.NoError(t, err)
	stop, err = bs.ServeMetrics()
	require.NoError(t, err)
	t.Cleanup(stop)

	// The relay: the write path only, as `causet relay` opens it.
	relayCfg := cfgFor()
	rs, err := app.Open(ctx, relayCfg, app.WithLogger(quiet()), app.WithWritePathOnly())
	require.NoError(t, err)
	t.Cleanup(rs.Close)
	r, err := rs.NewRelay(relay.Settings{Batch: 100, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	stop, err = rs.ServeMetrics()
	require.NoError(t, err)
	t.Cleanup(stop)

	runCtx, stopRun := context.WithCancel(ctx)
	done := map[string]chan error{"bridge": make(chan error, 1), "relay": make(chan error, 1)}
	go func() { done["bridge"] <- b.Run(runCtx) }()
	go func() { done["relay"] <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		for name, ch := range done {
			select {
			case err := <-ch:
				require.NoError(t, err, name)
			case <-time.After(60 * time.Second):
				t.Errorf("%s did not stop within 60s", name)
			}
		}
	})

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer producer.Close()
	occurred := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	envelope := func(id, typ, entity, payload string) *kgo.Record {
		return &kgo.Record{Key: []byte(entity), Value: fmt.Appendf(nil,
			`{"eventId":%q,"eventType":%q,"entityId":%q,"forkId":"production","occurredAt":%q,"payload":%s}`,
			id, typ, entity, occurred, payload)}
	}
	play := `{"artistId":"artist-1","plays":3,"days":1}`
	require.NoError(t, producer.ProduceSync(ctx,
		envelope("play-1", "TRACK_PLAYED", "listener-1", play),
		envelope("play-2", "TRACK_PLAYED", "listener-1", play),
		// Integer division by zero: ir_eval on every attempt; stays dead-lettered.
		envelope("play-bad", "TRACK_PLAYED", "listener-2", `{"artistId":"artist-2","plays":3,"days":0}`),
		// No followed_at column yet: sql on every attempt; replayed after the fix.
		envelope("follow-1", "ARTIST_FOLLOWED", "user-1", `{"artistId":"artist-1"}`),
		// A later event of the key follow-1 blocks: parked, then released behind it.
		envelope("follow-2", "ARTIST_FOLLOWED", "user-1", `{"artistId":"artist-2"}`),
		envelope("other-1", "ALBUM_RELEASED", "album-1", `{}`),
		&kgo.Record{Key: []byte("poison"), Value: []byte("not an envelope")},
	).FirstErr())

	db, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer db.Close()
	plays := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(plays), 0)::int FROM artist_stats`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	require.Eventually(t, func() bool { return plays() == 6 }, 60*time.Second, 100*time.Millisecond, "play-1 and play-2 applied inline")

	tc := ws.Temporal.Client // decodes the encrypted answers
	playBad := contract.RetryWorkflowID("artist_stats", "production", "play-bad")
	follow1 := contract.RetryWorkflowID("artist_followers", "production", "follow-1")
	waitState(t, ctx, tc, playBad, contract.StateDeadLettered)
	waitState(t, ctx, tc, follow1, contract.StateDeadLettered)

	// The fix, then a replay of follow-1: a replay that succeeds and an
	// operator action. play-bad stays open for the dead-letter scan.
	_, err = db.Exec(ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.NoError(t, tc.SignalWorkflow(ctx, follow1, "", contract.SignalReplay,
		contract.OperatorSignal{Identity: "observability-test", Reason: "followed_at added"}))
	waitState(t, ctx, tc, follow1, contract.StateSucceeded)

	// A PostgreSQL outage of this test's database alone, from a session on
	// the server's maintenance database: no new connection is accepted and
	// the open ones are cut, so the bridge's batch fails and its probe (a
	// pool ping) proves the outage. It waits it out.
	adminCfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	dbName := adminCfg.Database
	adminCfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	ident := pgx.Identifier{dbName}.Sanitize()
	_, err = admin.Exec(ctx, `ALTER DATABASE `+ident+` ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	restored := false
	restore := func() {
		if !restored {
			_, err := admin.Exec(context.Background(), `ALTER DATABASE `+ident+` ALLOW_CONNECTIONS true`)
			require.NoError(t, err)
			restored = true
		}
	}
	defer restore()
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)
	require.NoError(t, producer.ProduceSync(ctx, envelope("play-3", "TRACK_PLAYED", "listener-1", play)).FirstErr())
	require.True(t, assertEventually(60*time.Second, func() bool {
		return scrape(t, bridgeCfg.MetricsAddr)["causet_bridge_outage_pauses_total"]
	}), "the bridge proves the outage")
	restore()
	require.Eventually(t, func() bool { return plays() == 9 }, 90*time.Second, 200*time.Millisecond,
		"play-3 applied once PostgreSQL accepts connections again")

	// The dead-letter gauges come from the worker's scan, once a minute.
	var gone []string
	ok := assertEventually(90*time.Second, func() bool {
		gone = missing(want, scrape(t, workerCfg.MetricsAddr), scrape(t, bridgeCfg.MetricsAddr), scrape(t, relayCfg.MetricsAddr))
		return len(gone) == 0
	})
	require.True(t, ok, "metrics the rules or the dashboard read that no running worker, bridge or relay exports:\n  %s",
		strings.Join(gone, "\n  "))
	t.Logf("%d metric names and %d name patterns found on the worker's, the bridge's and the relay's /metrics",
		len(want.names), len(want.patterns))
}

// assertEventually polls cond every 500 ms until it holds or within passes.
func assertEventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitState waits until the retry workflow id answers its status query with
// state want.
func waitState(t *testing.T, ctx context.Context, c client.Client, id string, want contract.State) {
	t.Helper()
	testenv.WaitQuery(t, ctx, c, id, contract.QueryStatus, 90*time.Second, func(st contract.Status) bool { return st.State == want })
}
