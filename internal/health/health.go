package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds one /readyz answer: a probe that has not
// answered by then counts as failed, so an orchestrator's probe (whose own
// timeout is usually a few seconds) always gets an answer.
const DefaultTimeout = 2 * time.Second

// Check is one dependency /readyz asks; Name names it in a 503's reason.
type Check struct {
	Name  string
	Probe func(context.Context) error
}

// Live is one liveness check of /healthz: in-process, asking no other
// service (a dependency that is down must not get the process restarted),
// and quick.
type Live struct {
	Name  string
	Check func() error
}

// Health answers GET /healthz (200 while the process runs and every
// liveness check passes, else 503 naming the failing ones) and GET /readyz
// (200 when every check answers within the timeout, else 503 naming the
// failing ones). Checks may be added while it serves.
type Health struct {
	timeout time.Duration
	mu      sync.Mutex
	checks  []Check
	live    []Live
}

// New returns a Health with checks; timeout <= 0 is DefaultTimeout.
func New(timeout time.Duration, checks ...Check) *Health {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Health{timeout: timeout, checks: checks}
}

// Add adds a check to /readyz.
func (h *Health) Add(c Check) {
	h.mu.Lock()
	h.checks = append(h.checks, c)
	h.mu.Unlock()
}

// AddLive adds a liveness check to /healthz.
func (h *Health) AddLive(l Live) {
	h.mu.Lock()
	h.live = append(h.live, l)
	h.mu.Unlock()
}

// Alive runs the liveness checks: the reason of a failure names the failing
// ones ("" while all pass).
func (h *Health) Alive() (checks map[string]string, reason string) {
	h.mu.Lock()
	ls := append([]Live(nil), h.live...)
	h.mu.Unlock()
	var failed []string
	for _, l := range ls {
		if checks == nil {
			checks = map[string]string{}
		}
		if err := l.Check(); err != nil {
			checks[l.Name] = oneLineError(err)
			failed = append(failed, l.Name+": "+checks[l.Name])
			continue
		}
		checks[l.Name] = "ok"
	}
	return checks, strings.Join(failed, "; ")
}

// Register serves /healthz and /readyz on mux.
func (h *Health) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		checks, reason := h.Alive()
		if reason != "" {
			writeHealth(w, http.StatusServiceUnavailable, healthBody{Status: "stuck", Reason: reason, Checks: checks})
			return
		}
		writeHealth(w, http.StatusOK, healthBody{Status: "ok", Checks: checks})
	})
	mux.HandleFunc("GET /readyz", h.ready)
}

// healthBody is the JSON of /healthz and /readyz.
type healthBody struct {
	Status string `json:"status"`
	// Reason lists the failing checks, "name: error", joined by "; ".
	Reason string `json:"reason,omitempty"`
	// Checks is "ok" or the error of each check.
	Checks map[string]string `json:"checks,omitempty"`
}

type checkResult struct {
	i   int
	err error
}

// Ready runs every check at once, all bounded by the timeout, and returns
// each one's outcome ("ok" or its error) and the reason of a failure: the
// failing checks in the order they were added ("" when all answered).
func (h *Health) Ready(ctx context.Context) (checks map[string]string, reason string) {
	h.mu.Lock()
	cs := append([]Check(nil), h.checks...)
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	// Buffered: a probe that ignores its context may answer after we gave
	// up on it without blocking forever.
	results := make(chan checkResult, len(cs))
	for i, c := range cs {
		go func() { results <- checkResult{i, c.Probe(ctx)} }()
	}
	errs := make([]error, len(cs))
	answered := make([]bool, len(cs))
wait:
	for range cs {
		select {
		case r := <-results:
			errs[r.i], answered[r.i] = r.err, true
		case <-ctx.Done():
			break wait
		}
	}
	checks = make(map[string]string, len(cs))
	var failed []string
	for i, c := range cs {
		var msg string
		switch err := errs[i]; {
		case !answered[i]:
			msg = fmt.Sprintf("no answer within %s", h.timeout)
		case err == nil:
			checks[c.Name] = "ok"
			continue
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			msg = fmt.Sprintf("no answer within %s (%s)", h.timeout, oneLineError(err))
		default:
			msg = oneLineError(err)
		}
		checks[c.Name] = msg
		failed = append(failed, c.Name+": "+msg)
	}
	return checks, strings.Join(failed, "; ")
}

func (h *Health) ready(w http.ResponseWriter, r *http.Request) {
	checks, reason := h.Ready(r.Context())
	if reason != "" {
		writeHealth(w, http.StatusServiceUnavailable, healthBody{Status: "not ready", Reason: reason, Checks: checks})
		return
	}
	writeHealth(w, http.StatusOK, healthBody{Status: "ready", Checks: checks})
}

func writeHealth(w http.ResponseWriter, status int, b healthBody) {
	body, _ := json.Marshal(b)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// oneLineError keeps a reason short and on one line (pgx joins the errors of
// each address it tried with line breaks).
func oneLineError(err error) string {
	msg := lineBreaks.Replace(strings.TrimSpace(err.Error()))
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

var lineBreaks = strings.NewReplacer("\r\n", "; ", "\n", "; ")
