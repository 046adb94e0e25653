package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// submitRuntime answers POST /v1/intents like the runtime over an in-memory
// ledger: intentType "REJECT" is rejected, "FLAKY" gets one 503 first, an
// empty entityId is a 400.
type submitRuntime struct {
	mu       sync.Mutex
	ledger   map[string][]byte
	posts    map[string]int // POSTs per intentId
	received []submitLine
}

func newSubmitRuntime(t *testing.T) (*submitRuntime, *httptest.Server) {
	f := &submitRuntime{ledger: map[string][]byte{}, posts: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/intents", f.submit)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *submitRuntime) submit(w http.ResponseWriter, r *http.Request) {
	var in submitLine
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		submitAnswer(w, 400, map[string]any{"error": err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received = append(f.received, in)
	f.posts[in.IntentID]++
	switch {
	case in.EntityID == "":
		submitAnswer(w, 400, map[string]any{"error": "entityId is required"})
		return
	case in.IntentType == "FLAKY" && f.posts[in.IntentID] == 1:
		submitAnswer(w, 503, map[string]any{"error": "ledger write failed"})
		return
	}
	body, ok := f.ledger[in.IntentID]
	if !ok {
		a := map[string]any{"status": "SUCCESS", "intentId": in.IntentID, "events": []map[string]any{
			{"eventId": in.IntentID + ":1", "eventType": "DONE", "entityId": in.EntityID, "forkId": in.ForkID, "payload": in.Payload},
		}}
		if in.IntentType == "REJECT" {
			a = map[string]any{"status": "REJECTED", "intentId": in.IntentID, "rule": "no_self_follow", "reason": "a user cannot follow itself"}
		}
		body, _ = json.Marshal(a)
		f.ledger[in.IntentID] = body
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func submitAnswer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

const submitInput = `{"intentId":"i-1","intentType":"FOLLOW","entityId":"user-1","forkId":"production","payload":{"artistId":"a"}}

{"intentType":"FOLLOW","entityId":"user-2","forkId":"production","payload":{}}
{"intentId":"i-3","intentType":"REJECT","entityId":"user-1","forkId":"production","payload":{}}
{"intentId":"i-4","intentType":"FOLLOW","entityId":"","forkId":"production","payload":{}}
{"intentId":"i-5","intentType":"FLAKY","entityId":"user-3","forkId":"production","payload":{"n":1}}
not json
{"intentId":"i-7","intentType":"FOLLOW","entityId":"user-1","forkId":"production"}
`

func TestSubmitCommand(t *testing.T) {
	f, srv := newSubmitRuntime(t)
	var stdout, stderr bytes.Buffer
	oldIn, oldOut, oldErr := submitIn, submitOut, submitErr
	submitIn, submitOut, submitErr = strings.NewReader(submitInput), &stdout, &stderr
	t.Cleanup(func() { submitIn, submitOut, submitErr = oldIn, oldOut, oldErr })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err := submitCmd{URL: srv.URL}.Run(ctx)

	require.EqualError(t, err, "3 of 7 intents failed (reported above)")
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 7, stdout.String())
	require.Equal(t, "stdin:1\ti-1\tSUCCESS\tevents=1", lines[0])
	generated := strings.Split(lines[1], "\t")
	require.Equal(t, "stdin:3", generated[0])
	require.Len(t, generated[1], 26, "a random intentId")
	require.Equal(t, []string{"SUCCESS", "events=1"}, generated[2:])
	require.Equal(t, "stdin:4\ti-3\tREJECTED\trule=no_self_follow reason=\"a user cannot follow itself\"", lines[2])
	require.Equal(t, "stdin:5\ti-4\tFAILED\tPOST /v1/intents: 400 Bad Request: entityId is required", lines[3])
	require.Equal(t, "stdin:6\ti-5\tSUCCESS\tevents=1", lines[4], "the 503 was retried")
	require.True(t, strings.HasPrefix(lines[5], "stdin:7\t-\tFAILED\tnot a JSON intent: "), lines[5])
	require.Equal(t, "stdin:8\ti-7\tFAILED\tclient: intent i-7: payload must be a JSON object, got null", lines[6])
	require.Equal(t, "submitted to "+srv.URL+": 3 succeeded, 1 rejected, 3 failed\n", stderr.String())

	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.ledger, 4, "i-1, the generated one, i-3, i-5: each recorded once")
	require.Equal(t, 2, f.posts["i-5"])
	require.Equal(t, 1, f.posts["i-1"])
	require.Equal(t, generated[1], f.received[1].IntentID)
	require.JSONEq(t, `{"artistId":"a"}`, string(f.received[0].Payload))
}

// TestSubmitBinary runs the built command: CAUSET_RUNTIME_ADDR, a file
// argument and the exit status.
func TestSubmitBinary(t *testing.T) {
	_, srv := newSubmitRuntime(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(good, []byte(strings.Join(strings.Split(submitInput, "\n")[:4], "\n")), 0o644))
	all := filepath.Join(dir, "all.jsonl")
	require.NoError(t, os.WriteFile(all, []byte(submitInput), 0o644))

	stdout, stderr, code := runBinary(t, []string{"CAUSET_RUNTIME_ADDR=" + addr}, "submit", good)
	require.Equal(t, 0, code, stderr)
	require.Len(t, strings.Split(strings.TrimSpace(stdout), "\n"), 3)
	require.Contains(t, stdout, "good.jsonl:4\ti-3\tREJECTED")
	require.Equal(t, "submitted to http://"+addr+": 2 succeeded, 1 rejected, 0 failed\n", stderr)

	stdout, stderr, code = runBinary(t, []string{"CAUSET_RUNTIME_ADDR=127.0.0.1:1"}, "submit", "--url", addr, all)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "all.jsonl:5\ti-4\tFAILED\tPOST /v1/intents: 400 Bad Request")
	require.True(t, strings.HasSuffix(stderr, "causet: 3 of 7 intents failed (reported above)\n"), stderr)

	_, stderr, code = runBinary(t, []string{"CAUSET_RUNTIME_ADDR=http://x:1"}, "submit", good)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `CAUSET_RUNTIME_ADDR="http://x:1" is invalid: want host:port`)
}
