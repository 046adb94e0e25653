package app_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/internal/health"
)

// TestServeMetricsHealth: the metrics server answers /healthz and /readyz
// beside /metrics.
func TestServeMetricsHealth(t *testing.T) {
	addr := freeAddr(t)
	var down atomic.Bool
	stop, err := app.ServeMetrics(addr, prometheus.NewRegistry(), quiet(),
		health.Check{Name: "postgres", Probe: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}})
	require.NoError(t, err)
	defer stop()
	code, _ := httpGet(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := httpGet(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	down.Store(true)
	code, body = httpGet(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"status":"not ready","reason":"postgres: connection refused","checks":{"postgres":"connection refused"}}`, body)
	code, _ = httpGet(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
}
