package app

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/health"
)

// serveBounded serves h on a loopback port within t until the test ends.
func serveBounded(tb testing.TB, t serverTimeouts, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := t.server(h)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// silentClient connects to addr, sends request and then nothing more; it
// reads until the server closes the connection (or within, which fails the
// test) and returns what it read and how long the server kept it open.
func silentClient(t *testing.T, addr, request string, within time.Duration) (string, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(start.Add(within)))
	got, err := io.ReadAll(conn)
	require.NoError(t, err, "the server still held the connection after %s; it read %q", within, got)
	return string(got), time.Since(start)
}

// A client that goes silent mid-request, after an answer, or while its
// answer is written holds a connection only as long as each timeout says:
// without one, the connection stays open (the test's own deadline fails
// it), and each case is timed apart from the others.
func TestHTTPServerClosesSilentClients(t *testing.T) {
	bounds := serverTimeouts{header: time.Second, read: 1500 * time.Millisecond, write: time.Second, idle: 3 * time.Second}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(bounds.write + 500*time.Millisecond)
		_, _ = io.WriteString(w, "late")
	})
	addr := serveBounded(t, bounds, mux)
	const margin = 3 * time.Second
	between := func(t *testing.T, took, bound time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, took, bound*8/10, "closed before its own timeout (another one fired)")
		require.Less(t, took, bound+margin)
	}

	t.Run("headers never finished", func(t *testing.T) {
		t.Parallel()
		got, took := silentClient(t, addr, "GET /metrics HTTP/1.1\r\nHost: causet\r\n", bounds.header+margin)
		require.Empty(t, got, "no answer to a request never read")
		between(t, took, bounds.header)
	})
	t.Run("body never sent", func(t *testing.T) {
		t.Parallel()
		// The answer waits for the body to be read; here the write
		// timeout has passed by then, so none goes out.
		_, took := silentClient(t, addr, "POST /metrics HTTP/1.1\r\nHost: causet\r\nContent-Length: 100\r\n\r\n", bounds.read+margin)
		between(t, took, bounds.read)
	})
	t.Run("idle after an answer", func(t *testing.T) {
		t.Parallel()
		got, took := silentClient(t, addr, "GET /metrics HTTP/1.1\r\nHost: causet\r\n\r\n", bounds.idle+margin)
		require.Contains(t, got, "HTTP/1.1 200")
		between(t, took, bounds.idle)
	})
	t.Run("answer written past its deadline", func(t *testing.T) {
		t.Parallel()
		got, _ := silentClient(t, addr, "GET /slow HTTP/1.1\r\nHost: causet\r\n\r\n", bounds.write+margin)
		require.NotContains(t, got, "late", "an answer past the write timeout is not sent")
	})
}

// The metrics listener's own bounds, as documented: a scraper that never
// finishes its headers is dropped after 5 s, one that never sends its body
// after 10 s.
func TestMetricsListenerDropsSilentScrapers(t *testing.T) {
	require.Equal(t, serverTimeouts{header: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 2 * time.Minute},
		metricsTimeouts, "docs/PRODUCTION.md (Deadlines) names these")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(serveMetricsOn(ln, prometheus.NewRegistry(), nil, health.New(health.DefaultTimeout)))
	addr := ln.Addr().String()
	t.Run("headers", func(t *testing.T) {
		t.Parallel()
		_, took := silentClient(t, addr, "GET /metrics HTTP/1.1\r\nHost: causet\r\n", 10*time.Second)
		require.GreaterOrEqual(t, took, 4*time.Second)
	})
	t.Run("body", func(t *testing.T) {
		t.Parallel()
		got, took := silentClient(t, addr, "POST /metrics HTTP/1.1\r\nHost: causet\r\nContent-Length: 100\r\n\r\n", 15*time.Second)
		require.Contains(t, got, "HTTP/1.1 200")
		require.GreaterOrEqual(t, took, 8*time.Second)
	})
}
