package intentapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/ledger"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	url     string
	server  *intentapi.Server
	catalog *intents.Catalog
	ledger  *ledger.Ledger
	reg     *prometheus.Registry
	logs    *testenv.LogBuffer
}

// Retries of the fixture's ledger: 3 tries, 50 ms then 200 ms apart.
var (
	testWaits      = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond}
	testTryTimeout = 2 * time.Second
)

// setup gives a fresh database with the ledger, the example read models and
// projections, the example intent handlers and extra ones, and a server on
// it behind httptest. costLimit 0 is the default.
func setup(t *testing.T, costLimit uint64, extra ...string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	pool := testenv.Postgres(t)
	for _, name := range exampleprojections.Names() {
		ddl, err := exampleprojections.DDL(name)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, ddl)
		require.NoError(t, err)
		data, err := exampleprojections.Document(name)
		require.NoError(t, err)
		doc, err := projection.Parse(data)
		require.NoError(t, err)
		_, err = projection.Deploy(ctx, pool, doc)
		require.NoError(t, err)
	}
	var docs []string
	for _, name := range exampleintents.Names() {
		data, err := exampleintents.Document(name)
		require.NoError(t, err)
		docs = append(docs, string(data))
	}
	for _, d := range append(docs, extra...) {
		doc, err := intents.Parse([]byte(d))
		require.NoError(t, err)
		_, err = intents.Deploy(ctx, pool, doc)
		require.NoError(t, err)
	}
	catalog, err := intents.NewCatalog(ctx, pool, nil, intents.WithCostLimit(costLimit))
	require.NoError(t, err)
	f := &fixture{ctx: ctx, pool: pool, url: pool.Config().ConnString(), catalog: catalog,
		reg: prometheus.NewRegistry(), logs: &testenv.LogBuffer{}}
	f.ledger = ledger.New(pool, catalog, ledger.WithRetry(3, testWaits, testTryTimeout))
	f.server, err = intentapi.New(intentapi.Options{Catalog: catalog, Ledger: f.ledger,
		Health:     health.New(0, health.Check{Name: "postgres", Probe: pool.Ping}),
		Logger:     slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: f.reg, Gatherer: f.reg})
	require.NoError(t, err)
	return f
}

// do sends one request to the server's handler and returns the status and
// body; every answer is JSON.
func (f *fixture) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequestWithContext(f.ctx, method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(rec, req)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "%s %s", method, path)
	require.True(t, json.Valid(rec.Body.Bytes()), "%s", rec.Body.String())
	return rec.Code, rec.Body.Bytes()
}

// ready asks the operations listener's /readyz.
func (f *fixture) ready(t *testing.T) int {
	t.Helper()
	rec := httptest.NewRecorder()
	f.server.OpsHandler().ServeHTTP(rec, httptest.NewRequestWithContext(f.ctx, http.MethodGet, "/readyz", nil))
	return rec.Code
}

func (f *fixture) post(t *testing.T, body string) (int, []byte) {
	t.Helper()
	return f.do(t, http.MethodPost, "/v1/intents", body)
}

// intentBody renders a request body.
func intentBody(t *testing.T, id, typ, entity string, payload any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"intentId": id, "intentType": typ, "entityId": entity, "forkId": "production", "payload": payload})
	require.NoError(t, err)
	return string(b)
}

type successBody struct {
	Status   string            `json:"status"`
	IntentID string            `json:"intentId"`
	Events   []json.RawMessage `json:"events"`
	Rule     string            `json:"rule"`
	Reason   string            `json:"reason"`
	Error    string            `json:"error"`
}

func decode(t *testing.T, body []byte) successBody {
	t.Helper()
	var b successBody
	require.NoError(t, json.Unmarshal(body, &b), "%s", body)
	return b
}

// envelopes decodes a SUCCESS body's events with event.Decode, as the
// projection worker will.
func envelopes(t *testing.T, body []byte) []event.Envelope {
	t.Helper()
	b := decode(t, body)
	require.Equal(t, "SUCCESS", b.Status, "%s", body)
	out := make([]event.Envelope, len(b.Events))
	for i, raw := range b.Events {
		ev, err := event.Decode(raw)
		require.NoError(t, err, "%s", raw)
		out[i] = ev
	}
	return out
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func (f *fixture) requireNothingWritten(t *testing.T, what string) {
	t.Helper()
	for _, table := range []string{"causet_intents", "causet_events", "causet_entity_sequences"} {
		require.Zero(t, f.count(t, table), "%s: %s", what, table)
	}
}

// apply applies events to a projection, as the worker would.
func (f *fixture) apply(t *testing.T, projectionName string, evs ...event.Envelope) {
	t.Helper()
	engine, err := projection.NewEngine(f.ctx, f.pool, nil)
	require.NoError(t, err)
	defer engine.Close()
	for _, ev := range evs {
		res, err := engine.Apply(f.ctx, projectionName, ev)
		require.NoError(t, err)
		require.Equal(t, projection.StatusApplied, res.Status, "%+v", res.Err)
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

// metric returns the value of a counter, or a histogram's count, with the
// given status label.
func (f *fixture) metric(t *testing.T, name, status string) float64 {
	t.Helper()
	families, err := f.reg.Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == status {
					if h := m.GetHistogram(); h != nil {
						return float64(h.GetSampleCount())
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{status=%q}", name, status)
	return 0
}
