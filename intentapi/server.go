package intentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/ledger"
)

// Defaults of Options.
const (
	// TokensReloadInterval is how often a token file is checked for changes.
	TokensReloadInterval   = 5 * time.Second
	DefaultIntentTimeout   = 30 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRefreshInterval = 5 * time.Second
)

// Options configure New.
type Options struct {
	// Catalog holds the intent handlers; Ledger decides with it. Required.
	Catalog *intents.Catalog
	// Auth are the bearer tokens the API accepts (POST needs scope write,
	// GET scope read); nil serves without authentication (AuthFromEnv).
	Auth *Tokens
	// Ledger records intents. Required.
	Ledger *ledger.Ledger
	// Health answers /healthz and /readyz on OpsHandler; nil is always
	// ready.
	Health *health.Health
	// Logger gets the access log (DEBUG) and one line per intent (INFO);
	// nil discards.
	Logger *slog.Logger
	// Registerer, when set, gets the server's metrics.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served as GET /metrics by OpsHandler.
	Gatherer prometheus.Gatherer
	// IntentTimeout bounds one intent, the ledger's retries included
	// (DefaultIntentTimeout); past it the answer is 503.
	IntentTimeout time.Duration
	// ShutdownTimeout bounds how long Serve waits for requests in flight
	// once its context ends (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// RefreshInterval is how often Serve reloads the catalog besides on each
	// deploy notification, so a deploy is used within it even while the
	// notification cannot arrive (DefaultRefreshInterval). A request for a
	// type the catalog does not know reloads it at once (at most once a
	// second).
	RefreshInterval time.Duration
}

// Server is the write path's HTTP server.
type Server struct {
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	handler http.Handler
	ops     http.Handler
}

// New builds the server and registers its metrics.
func New(opts Options) (*Server, error) {
	if opts.Catalog == nil || opts.Ledger == nil {
		return nil, errors.New("runtime: Catalog and Ledger are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.IntentTimeout <= 0 {
		opts.IntentTimeout = DefaultIntentTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, logger: opts.Logger, metrics: m}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/intents", s.require(ScopeWrite, s.submit))
	mux.HandleFunc("/v1/intents", methodNotAllowed(http.MethodPost))
	mux.HandleFunc("GET /v1/intents/{intentId}", s.require(ScopeRead, s.status))
	mux.HandleFunc("/v1/intents/{intentId}", methodNotAllowed(http.MethodGet))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	s.handler = s.accessLog(mux)
	// Health and metrics answer on a listener of their own (the process's
	// CAUSET_METRICS_ADDR), never on the API's, and need no token.
	ops := http.NewServeMux()
	h := opts.Health
	if h == nil {
		h = health.New(health.DefaultTimeout)
	}
	h.Register(ops)
	if opts.Gatherer != nil {
		ops.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	s.ops = ops
	return s, nil
}

// Handler is the API's handler (/v1/intents), with its access log and, with
// Auth, its bearer tokens.
func (s *Server) Handler() http.Handler { return s.handler }

// OpsHandler serves /healthz, /readyz (Health) and /metrics (Gatherer).
func (s *Server) OpsHandler() http.Handler { return s.ops }

// Serve serves on ln until ctx ends, refreshing the catalog on each deploy
// notification and every RefreshInterval, then stops accepting and waits up
// to ShutdownTimeout for the requests in flight, which keep their own
// contexts: an intent being recorded is finished, not cut.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.opts.IntentTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.opts.Catalog.Watch(watchCtx, s.opts.RefreshInterval)
	if s.opts.Auth != nil {
		go s.opts.Auth.WatchFile(watchCtx, TokensReloadInterval, s.logger)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc // http.ErrServerClosed
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("runtime: shutdown: %w", err)
	}
	return nil
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed (want %s)", r.Method, allow))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	writeBody(w, status, body)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// statusWriter records what the access log reports.
type statusWriter struct {
	http.ResponseWriter
	status, bytes int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		s.logger.LogAttrs(r.Context(), slog.LevelDebug, "http_request", slog.String("event", "http_request"),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", sw.status),
			slog.Int("bytes", sw.bytes), slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
			slog.String("remote", r.RemoteAddr))
	})
}
