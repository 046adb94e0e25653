package client

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// step is what the fake runtime does with one request.
type step int

const (
	serve         step = iota // answer as the runtime would
	fail503                   // 503, nothing written
	fail500                   // 500, nothing written
	throttle                  // 429, nothing written
	hangBefore                // write nothing and never answer (the client times out)
	hangAfter                 // record the intent, then never answer
	resetBefore               // reset the connection, nothing written
	resetAfter                // record the intent, then reset the connection
	unknown504                // record the intent, then answer 504: the commit's answer was lost
	inProgress409             // 409: the same intentId is in progress, nothing written by this request
)

// fakeRuntime is the runtime's HTTP API over an in-memory ledger. Scripts
// say what the n-th POST and GET do; past a script's end, requests are
// served. intentType "REJECT" is rejected by preflight, "BROKEN" fails its
// handler (422); an empty entityId is a 400.
type fakeRuntime struct {
	t *testing.T

	mu         sync.Mutex
	postScript []step
	getScript  []step
	posts      int
	gets       int
	ledger     map[string][]byte // intentId → the recorded 200 body
	received   []wireIntent
}

func newFakeRuntime(t *testing.T, posts, gets []step) (*fakeRuntime, *httptest.Server) {
	f := &fakeRuntime{t: t, postScript: posts, getScript: gets, ledger: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/intents", f.submit)
	mux.HandleFunc("GET /v1/intents/{intentId}", f.status)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeRuntime) next(script []step, n *int) step {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := *n
	*n++
	if i < len(script) {
		return script[i]
	}
	return serve
}

// counts returns how many POSTs and GETs arrived and how many intents are
// recorded.
func (f *fakeRuntime) counts() (posts, gets, recorded int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.posts, f.gets, len(f.ledger)
}

// intents returns the intents as the runtime received them, one per POST.
func (f *fakeRuntime) intents() []wireIntent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wireIntent{}, f.received...)
}

func (f *fakeRuntime) submit(w http.ResponseWriter, r *http.Request) {
	s := f.next(f.postScript, &f.posts)
	var in wireIntent
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "malformed JSON: " + err.Error()})
		return
	}
	f.mu.Lock()
	f.received = append(f.received, in)
	f.mu.Unlock()
	if in.IntentID == "" || in.EntityID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "intentId and entityId are required"})
		return
	}
	switch s {
	case fail503:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "ledger write failed: connection refused"})
		return
	case fail500:
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case throttle:
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "slow down"})
		return
	case inProgress409:
		writeJSON(w, http.StatusConflict, map[string]any{"error": "a request with this intentId is in progress"})
		return
	case hangBefore:
		hang(r)
		return
	case resetBefore:
		reset(f.t, w)
		return
	}
	if in.IntentType == "BROKEN" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "handler BROKEN: no such field 'x'"})
		return
	}
	f.mu.Lock()
	body, ok := f.ledger[in.IntentID]
	if !ok {
		body = outcome(in)
		f.ledger[in.IntentID] = body
	}
	f.mu.Unlock()
	switch s {
	case hangAfter:
		hang(r)
		return
	case resetAfter:
		reset(f.t, w)
		return
	case unknown504:
		writeJSON(w, http.StatusGatewayTimeout, map[string]any{"error": "the ledger did not confirm the commit: the outcome is unknown"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func outcome(in wireIntent) []byte {
	var a map[string]any
	if in.IntentType == "REJECT" {
		a = map[string]any{"status": ResultRejected, "intentId": in.IntentID, "rule": "no_self_follow", "reason": "a user cannot follow itself"}
	} else {
		a = map[string]any{"status": ResultSuccess, "intentId": in.IntentID, "events": []map[string]any{{
			"eventId": in.IntentID + ":1", "eventType": in.IntentType + "_DONE", "entityId": in.EntityID,
			"forkId": in.ForkID, "intentId": in.IntentID, "sequence": 1,
			"occurredAt": "2026-12-02T12:00:00Z", "payload": in.Payload,
		}}}
	}
	b, _ := json.Marshal(a)
	return b
}

func (f *fakeRuntime) status(w http.ResponseWriter, r *http.Request) {
	switch f.next(f.getScript, &f.gets) {
	case fail503:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "database unavailable"})
		return
	case hangBefore, hangAfter:
		hang(r)
		return
	}
	id := r.PathValue("intentId")
	f.mu.Lock()
	body, ok := f.ledger[id]
	f.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"intentId": id, "status": StateUnknown})
		return
	}
	var a map[string]any
	_ = json.Unmarshal(body, &a)
	a["status"] = map[string]string{ResultSuccess: StateSucceeded, ResultRejected: StateRejected}[a["status"].(string)]
	writeJSON(w, http.StatusOK, a)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// hang waits until the client gives up on the request.
func hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(30 * time.Second):
	}
}

// reset drops the connection with a TCP RST, as a crashed peer or a
// middlebox does.
func reset(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
