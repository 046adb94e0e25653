package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/health"
)

type healthAnswer struct {
	Status string            `json:"status"`
	Reason string            `json:"reason"`
	Checks map[string]string `json:"checks"`
}

func serveHealth(t *testing.T, h *health.Health, path string) (int, healthAnswer) {
	t.Helper()
	mux := http.NewServeMux()
	h.Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var a healthAnswer
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a), "body %q", rec.Body.String())
	return rec.Code, a
}

func probe(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

func TestHealthReady(t *testing.T) {
	h := health.New(time.Second,
		health.Check{Name: "postgres", Probe: probe(nil)},
		health.Check{Name: "temporal", Probe: probe(nil)})
	code, a := serveHealth(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, healthAnswer{Status: "ready", Checks: map[string]string{"postgres": "ok", "temporal": "ok"}}, a)

	code, a = serveHealth(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", a.Status)

	// No checks: ready (a process that depends on nothing it can ask).
	code, a = serveHealth(t, health.New(0), "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready", a.Status)
}

func TestHealthNotReadyNamesTheFailingDependency(t *testing.T) {
	h := health.New(time.Second,
		health.Check{Name: "postgres", Probe: probe(errors.New("PostgreSQL at db:5432: connection refused\nsecond address: refused"))},
		health.Check{Name: "temporal", Probe: probe(nil)})
	h.Add(health.Check{Name: "kafka", Probe: probe(errors.New(`not yet joined consumer group "g"`))})
	code, a := serveHealth(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready", a.Status)
	require.Equal(t, `postgres: PostgreSQL at db:5432: connection refused; second address: refused; kafka: not yet joined consumer group "g"`, a.Reason,
		"failing checks in the order added, each on one line")
	require.Equal(t, "ok", a.Checks["temporal"])
	require.Equal(t, `not yet joined consumer group "g"`, a.Checks["kafka"])

	// Liveness does not depend on them.
	code, _ = serveHealth(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
}

// TestHealthTimeout: a probe that never answers, even one that ignores its
// context, fails /readyz after the timeout instead of hanging it.
func TestHealthTimeout(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	h := health.New(200*time.Millisecond,
		health.Check{Name: "postgres", Probe: probe(nil)},
		health.Check{Name: "temporal", Probe: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		health.Check{Name: "kafka", Probe: func(context.Context) error { <-block; return nil }})
	start := time.Now()
	code, a := serveHealth(t, h, "/readyz")
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
	require.Less(t, took, 2*time.Second, "bounded by the timeout")
	require.Equal(t, "ok", a.Checks["postgres"])
	require.True(t, strings.HasPrefix(a.Checks["temporal"], "no answer within 200ms"), a.Checks["temporal"])
	require.Equal(t, "no answer within 200ms", a.Checks["kafka"])
	// The temporal probe may return its context's error before the
	// handler gives up on it, or not: either way it names the timeout.
	require.Regexp(t, `^temporal: no answer within 200ms( \(context deadline exceeded\))?; kafka: no answer within 200ms$`, a.Reason)
}

// A liveness check that fails fails /healthz, naming it; /readyz does not
// ask it.
func TestHealthLivenessNamesTheStuckPart(t *testing.T) {
	h := health.New(time.Second, health.Check{Name: "postgres", Probe: probe(nil)})
	var stuck error
	h.AddLive(health.Live{Name: "bridge", Check: func() error { return stuck }})
	code, a := serveHealth(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, healthAnswer{Status: "ok", Checks: map[string]string{"bridge": "ok"}}, a)

	stuck = errors.New("partition 3 of events has made no progress for 5m0s while it has work")
	code, a = serveHealth(t, h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "stuck", a.Status)
	require.Equal(t, "bridge: partition 3 of events has made no progress for 5m0s while it has work", a.Reason)

	code, _ = serveHealth(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)
}
