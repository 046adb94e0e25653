package intentapi_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/intentapi"
)

func TestHealthReadinessAndUnknownRoutes(t *testing.T) {
	f := setup(t, 0)
	for _, tc := range []struct {
		method, path string
		code         int
		want, allow  string
		ops          bool // on the operations listener, not the API's
	}{
		{"GET", "/healthz", 200, `{"status":"ok"}`, "", true},
		{"GET", "/readyz", 200, `{"status":"ready","checks":{"postgres":"ok"}}`, "", true},
		{"GET", "/healthz", 404, `{"error":"no such endpoint: GET /healthz"}`, "", false},
		{"GET", "/metrics", 404, `{"error":"no such endpoint: GET /metrics"}`, "", false},
		{"GET", "/nope", 404, `{"error":"no such endpoint: GET /nope"}`, "", false},
		{"GET", "/v1/intents", 405, `{"error":"method GET not allowed (want POST)"}`, "POST", false},
		{"DELETE", "/v1/intents/x", 405, `{"error":"method DELETE not allowed (want GET)"}`, "GET", false},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		rec := httptest.NewRecorder()
		h := f.server.Handler()
		if tc.ops {
			h = f.server.OpsHandler()
		}
		h.ServeHTTP(rec, req)
		require.Equal(t, tc.code, rec.Code, tc.path)
		require.JSONEq(t, tc.want, rec.Body.String())
		require.Equal(t, tc.allow, rec.Header().Get("Allow"))
	}
}

func TestMetricsAndLogLines(t *testing.T) {
	f := setup(t, 0)
	code, _ := f.post(t, intentBody(t, "m-1", "FollowArtist", "user-1", map[string]any{"artistId": "a"}))
	require.Equal(t, http.StatusOK, code)
	code, _ = f.post(t, intentBody(t, "m-2", "UnfollowArtist", "user-1", map[string]any{"artistId": "b"}))
	require.Equal(t, http.StatusOK, code)
	code, _ = f.post(t, `{}`)
	require.Equal(t, http.StatusBadRequest, code)

	srv := httptest.NewServer(f.server.OpsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text := readAll(t, resp.Body)
	for _, want := range []string{
		`causet_runtime_intents_total{status="success"} 1`,
		`causet_runtime_intents_total{status="rejected"} 1`,
		`causet_runtime_intents_total{status="invalid"} 1`,
		`causet_runtime_intents_total{status="unavailable"} 0`,
		`causet_runtime_intent_duration_seconds_count{status="success"} 1`,
	} {
		require.Contains(t, text, want)
	}

	lines := f.logs.Where(t, "msg", "intent_outcome")
	require.Len(t, lines, 3)
	require.Equal(t, "INFO", lines[0]["level"])
	require.Equal(t, "intent_outcome", lines[0]["event"])
	require.Equal(t, "m-1", lines[0]["intentId"])
	require.Equal(t, "success", lines[0]["status"])
	require.EqualValues(t, 1, lines[0]["events"])
	require.EqualValues(t, 1, lines[0]["handlerVersion"])
	require.Equal(t, "rejected", lines[1]["status"])
	require.Equal(t, "following", lines[1]["rule"])
	require.Equal(t, "invalid", lines[2]["status"])
	require.EqualValues(t, 400, lines[2]["httpStatus"])
	require.Equal(t, "intentId is required and must be a non-empty string", lines[2]["error"])

	access := f.logs.Where(t, "msg", "http_request")
	require.GreaterOrEqual(t, len(access), 3)
	require.Equal(t, "DEBUG", access[0]["level"])
	require.Equal(t, "/v1/intents", access[0]["path"])
	require.EqualValues(t, 200, access[0]["status"])

	_, err = intentapi.New(intentapi.Options{Catalog: f.catalog, Ledger: f.ledger, Registerer: f.reg})
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &are, "a second server cannot register on the same registry")
}

func TestServeFinishesRequestsInFlight(t *testing.T) {
	f := setup(t, 0)
	code, _ := f.post(t, intentBody(t, "flight-0", "FollowArtist", "user-1", map[string]any{"artistId": "a"}))
	require.Equal(t, http.StatusOK, code)
	// A transaction holding user-1's sequence row keeps the next intent of
	// user-1 in flight until it ends.
	blocker, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(f.ctx, `SELECT 1 FROM causet_entity_sequences WHERE entity_id = 'user-1' FOR UPDATE`)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.server.Serve(ctx, ln) }()

	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/intents", "application/json",
			strings.NewReader(intentBody(t, "flight-1", "FollowArtist", "user-1", map[string]any{"artistId": "b"})))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%causet_entity_sequences%'`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the intent waits for the row")
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned with a request in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_, err = net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	require.Error(t, err, "no new connections once shutting down")
	require.NoError(t, blocker.Rollback(f.ctx))
	require.Equal(t, http.StatusOK, <-answered, "the intent in flight was finished, not cut")
	require.NoError(t, <-served)
}

func TestAddrFromEnv(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(string) (string, bool) { return v, set }
	}
	addr, err := intentapi.AddrFromEnv(env("", false))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", addr)
	addr, err = intentapi.AddrFromEnv(env(" :9000 ", true))
	require.NoError(t, err)
	require.Equal(t, ":9000", addr)
	for _, bad := range []string{"", "8080", "host:", "host:http", "h:70000", "a:b:c"} {
		_, err := intentapi.AddrFromEnv(env(bad, true))
		require.Error(t, err, bad)
		require.True(t, strings.HasPrefix(err.Error(), `CAUSET_RUNTIME_ADDR="`+bad+`" is invalid: want host:port, such as 127.0.0.1:8080`), err.Error())
	}
}
