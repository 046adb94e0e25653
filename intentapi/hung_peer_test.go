package intentapi_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/ledger"
)

// A peer in front of the runtime's PostgreSQL (a pooler, a database proxy)
// stops answering for 40 s: its connections stay open and acknowledged but
// silent for good, new ones are served after it. Every request is answered
// meanwhile, 503 within the ledger's bounded tries (re-submitting is safe),
// none hangs; once the peer answers new connections, a re-submitted intent
// succeeds within 30 s and is recorded once.
func TestRuntimeAnswersThroughAHungDatabaseProxy(t *testing.T) {
	const hangFor = 40 * time.Second
	f := setup(t, 0)
	pool, peer := testenv.PoolBehindHungPeer(t, f.ctx, f.pool, 2*time.Second)
	led := ledger.New(pool, f.catalog) // the runtime's default tries and deadlines
	reg := prometheus.NewRegistry()
	server, err := intentapi.New(intentapi.Options{Catalog: f.catalog, Ledger: led,
		Health:     health.New(0, health.Check{Name: "postgres", Probe: pool.Ping}),
		Logger:     slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: reg, Gatherer: reg})
	require.NoError(t, err)
	f.server = server

	code, answer := f.post(t, intentBody(t, "before", "FollowArtist", "user-1", map[string]any{"artistId": "a"}))
	require.Equal(t, http.StatusOK, code, "%s", answer)

	peer.Hang()
	hung := time.Now()
	body := intentBody(t, "during", "FollowArtist", "user-1", map[string]any{"artistId": "b"})
	bound := time.Duration(ledger.DefaultTries)*ledger.DefaultTryTimeout + 5*time.Second
	for n := 0; time.Since(hung) < hangFor-bound; n++ {
		start := time.Now()
		code, answer := f.post(t, body)
		took := time.Since(start)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s", answer)
		require.Equal(t, "the ledger is unavailable; re-submitting this intent is safe", decode(t, answer).Error)
		require.Less(t, took, bound, "answered within the ledger's tries")
		if n == 0 {
			t.Logf("the first request during the hang was answered 503 in %s", took.Round(100*time.Millisecond))
		}
	}
	time.Sleep(time.Until(hung.Add(hangFor)))
	peer.Answer()
	answered := time.Now()
	var first []byte
	require.Eventually(t, func() bool {
		code, first = f.post(t, body)
		return code == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "a re-submission succeeds within 30 s of the proxy answering")
	t.Logf("the re-submitted intent succeeded %.1f s after the proxy answered new connections", time.Since(answered).Seconds())
	require.Equal(t, int64(2), envelopes(t, first)[0].Sequence)
	code, again := f.post(t, body)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(first), string(again), "the recorded answer")
	var intentsRows, events int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM causet_intents WHERE intent_id = 'during'").Scan(&intentsRows))
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM causet_events WHERE intent_id = 'during'").Scan(&events))
	require.Equal(t, []int{1, 1}, []int{intentsRows, events}, "recorded once")
}
