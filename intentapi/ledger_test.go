package intentapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/testenv"
)

const twice = `
intent_type: Twice
emits:
  - {event_type: FIRST, payload: {n: 1}}
  - {event_type: SECOND, payload: {n: 2}}
`

func TestHandlerFailureIs422AndWritesNothing(t *testing.T) {
	f := setup(t, 1000, `
intent_type: Divide
emits: [{event_type: DIVIDED, payload: {q: intent.payload.a / intent.payload.b}}]
`)
	// Deployed under a generous limit, evaluated under the server's 1000.
	doc, err := intents.Parse([]byte(`
intent_type: Square
emits: [{event_type: SQUARED, payload: {n: "intent.payload.items.map(x, x * x).size()"}}]
`), intents.WithCostLimit(1_000_000_000))
	require.NoError(t, err)
	_, err = intents.Deploy(f.ctx, f.pool, doc, intents.WithCostLimit(1_000_000_000))
	require.NoError(t, err)
	require.NoError(t, f.catalog.Refresh(f.ctx))

	code, body := f.post(t, intentBody(t, "d-1", "Divide", "e", map[string]any{"a": 1, "b": 0}))
	require.Equal(t, http.StatusUnprocessableEntity, code, "%s", body)
	require.Equal(t, "intent handler failed: emits[0].payload.q: division by zero", decode(t, body).Error)

	items := make([]int, 2000)
	code, body = f.post(t, intentBody(t, "s-1", "Square", "e", map[string]any{"items": items}))
	require.Equal(t, http.StatusUnprocessableEntity, code, "%s", body)
	require.Equal(t, "intent handler failed: emits[0].payload.n: CEL cost limit 1000 exceeded", decode(t, body).Error)
	f.requireNothingWritten(t, "422")
	require.Equal(t, 2.0, f.metric(t, "causet_runtime_intents_total", "unprocessable"))

	// Deterministic: the same intent fails the same way, and is not recorded.
	code, _ = f.post(t, intentBody(t, "d-1", "Divide", "e", map[string]any{"a": 1, "b": 0}))
	require.Equal(t, http.StatusUnprocessableEntity, code)
	code, body = f.post(t, intentBody(t, "d-2", "Divide", "e", map[string]any{"a": 6, "b": 3}))
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.JSONEq(t, `{"q":2}`, string(envelopes(t, body)[0].Payload))
}

func TestResubmissionReplaysTheRecordedBody(t *testing.T) {
	f := setup(t, 0)
	first := intentBody(t, "r-1", "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"})
	code, body := f.post(t, first)
	require.Equal(t, http.StatusOK, code)
	code, rejected := f.post(t, intentBody(t, "r-2", "UnfollowArtist", "user-1", map[string]any{"artistId": "nobody"}))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "REJECTED", decode(t, rejected).Status)

	code, again := f.post(t, first)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(body), string(again), "byte for byte")
	// The same intentId with another request: refused, nothing written.
	code, reused := f.post(t, intentBody(t, "r-1", "FollowArtist", "user-1", map[string]any{"artistId": "another"}))
	require.Equal(t, http.StatusUnprocessableEntity, code, "%s", reused)
	require.Contains(t, string(reused), "intentId r-1 was already used for a different request")
	require.Equal(t, 1.0, f.metric(t, "causet_runtime_intents_total", "reused"))
	code, again = f.post(t, intentBody(t, "r-2", "UnfollowArtist", "user-1", map[string]any{"artistId": "nobody"}))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(rejected), string(again))

	require.Equal(t, 2, f.count(t, "causet_intents"))
	require.Equal(t, 1, f.count(t, "causet_events"))
	var last int64
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT last_sequence FROM causet_entity_sequences").Scan(&last))
	require.Equal(t, int64(1), last, "a replay takes no sequence number")
	require.Equal(t, 2.0, f.metric(t, "causet_runtime_intents_total", "replayed"))
	require.Equal(t, 1.0, f.metric(t, "causet_runtime_intents_total", "success"))
	require.Equal(t, 1.0, f.metric(t, "causet_runtime_intents_total", "rejected"))
}

// TestPostgresOutage stops the shared PostgreSQL cluster: it must not run in
// parallel with other tests.
func TestPostgresOutage(t *testing.T) {
	f := setup(t, 0)
	code, _ := f.post(t, intentBody(t, "before", "FollowArtist", "user-1", map[string]any{"artistId": "a"}))
	require.Equal(t, http.StatusOK, code)
	body := intentBody(t, "during", "FollowArtist", "user-1", map[string]any{"artistId": "b"})

	testenv.StopPostgres(t)
	start := time.Now()
	code, answer := f.post(t, body)
	require.Equal(t, http.StatusServiceUnavailable, code, "%s", answer)
	require.Equal(t, "the ledger is unavailable; re-submitting this intent is safe", decode(t, answer).Error)
	require.GreaterOrEqual(t, time.Since(start), testWaits[0]+testWaits[1], "after the bounded retries")
	code = f.ready(t)
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = f.do(t, http.MethodGet, "/v1/intents/during", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	lines := f.logs.Where(t, "msg", "intent_outcome")
	require.Equal(t, "unavailable", lines[len(lines)-1]["status"])
	require.Contains(t, lines[len(lines)-1]["error"], "ledger unavailable: begin failed after 3 tries")

	testenv.StartPostgres(t)
	// A fresh pool: the server's evicts its broken connections as it uses them.
	check, err := pgxpool.New(f.ctx, f.url)
	require.NoError(t, err)
	defer check.Close()
	var nIntents, events int
	require.NoError(t, check.QueryRow(f.ctx, "SELECT count(*) FROM causet_intents WHERE intent_id = 'during'").Scan(&nIntents))
	require.NoError(t, check.QueryRow(f.ctx, "SELECT count(*) FROM causet_events WHERE intent_id = 'during'").Scan(&events))
	require.Zero(t, nIntents+events, "a 503 wrote nothing")

	code, first := f.post(t, body)
	require.Equal(t, http.StatusOK, code, "%s", first)
	require.Equal(t, int64(2), envelopes(t, first)[0].Sequence)
	code, again := f.post(t, body)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(first), string(again))
	require.NoError(t, check.QueryRow(f.ctx, "SELECT count(*) FROM causet_intents WHERE intent_id = 'during'").Scan(&nIntents))
	require.NoError(t, check.QueryRow(f.ctx, "SELECT count(*) FROM causet_events WHERE intent_id = 'during'").Scan(&events))
	require.Equal(t, []int{1, 1}, []int{nIntents, events}, "succeeded once")
	code = f.ready(t)
	require.Equal(t, http.StatusOK, code)
}

func TestConcurrentSubmissionsOfOneIntent(t *testing.T) {
	f := setup(t, 0)
	body := intentBody(t, "same", "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"})
	const n = 50
	answers := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b := f.post(t, body)
			codes[i], answers[i] = code, string(b)
		}()
	}
	wg.Wait()
	// A request that finds the first still being recorded is told so (409,
	// nothing written); every other one gets the recorded answer.
	var recorded string
	inProgress := 0
	for i := range n {
		switch codes[i] {
		case http.StatusConflict:
			inProgress++
			require.Contains(t, answers[i], "a request with this intentId is in progress")
		case http.StatusOK:
			if recorded == "" {
				recorded = answers[i]
			}
			require.Equal(t, recorded, answers[i], "identical answers")
		default:
			t.Fatalf("answer %d: %d %s", i, codes[i], answers[i])
		}
	}
	code, again := f.post(t, body)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, recorded, string(again))
	require.Equal(t, 1, f.count(t, "causet_intents"))
	require.Equal(t, 1, f.count(t, "causet_events"), "one ledger write")
	require.Equal(t, 1.0, f.metric(t, "causet_runtime_intents_total", "success"))
	require.Equal(t, float64(inProgress), f.metric(t, "causet_runtime_intents_total", "in_progress"))
	require.Equal(t, float64(n-inProgress), f.metric(t, "causet_runtime_intents_total", "replayed"))
}

func TestConcurrentIntentsOnOneEntityGetConsecutiveSequences(t *testing.T) {
	f := setup(t, 0, twice)
	const n = 40
	seqs := make([][]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := intentBody(t, fmt.Sprintf("c-%d", i), "Twice", "hot", map[string]any{})
			if i%2 == 1 {
				body = intentBody(t, fmt.Sprintf("c-%d", i), "PlayTrack", "hot",
					map[string]any{"artistId": "a", "trackId": "t", "plays": 1, "days": 1})
			}
			code, b := f.post(t, body)
			if code != http.StatusOK {
				t.Errorf("intent %d: %d %s", i, code, b)
				return
			}
			for _, ev := range envelopes(t, b) {
				seqs[i] = append(seqs[i], ev.Sequence)
			}
		}()
	}
	wg.Wait()
	var all []int64
	for i, s := range seqs {
		for j := 1; j < len(s); j++ {
			require.Equal(t, s[j-1]+1, s[j], "intent %d numbers its events consecutively", i)
		}
		all = append(all, s...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	total := n/2*2 + n/2
	require.Len(t, all, total)
	for i, s := range all {
		require.Equal(t, int64(i+1), s, "no gaps, no duplicates")
	}
	// Committed in sequence order: ledger order is sequence order.
	rows, err := f.pool.Query(f.ctx, "SELECT sequence FROM causet_events WHERE entity_id = 'hot' ORDER BY position")
	require.NoError(t, err)
	var byPosition []int64
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		byPosition = append(byPosition, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, all, byPosition)
}

func TestStatusEndpoint(t *testing.T) {
	f := setup(t, 0)
	code, body := f.do(t, http.MethodGet, "/v1/intents/nope", "")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"intentId":"nope","status":"unknown"}`, string(body))

	// An intentId that could never be read back is refused when submitted.
	for _, bad := range []string{"user-1:follow/artist-9", ".", "..", " padded", "tab\there"} {
		code, body := f.post(t, intentBody(t, bad, "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"}))
		require.Equal(t, http.StatusBadRequest, code, "%q: %s", bad, body)
		require.Contains(t, string(body), "intentId")
	}
	require.Zero(t, f.count(t, "causet_intents"))

	id := "user-1:follow.artist-9@2026~1" // every character an intentId may have beyond letters and digits
	code, posted := f.post(t, intentBody(t, id, "FollowArtist", "user-1", map[string]any{"artistId": "artist-9"}))
	require.Equal(t, http.StatusOK, code)
	code, body = f.do(t, http.MethodGet, "/v1/intents/"+id, "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var st struct {
		IntentID, Status string
		Events           []map[string]any
	}
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, id, st.IntentID)
	require.Equal(t, "succeeded", st.Status)
	var sent struct{ Events []map[string]any }
	require.NoError(t, json.Unmarshal(posted, &sent))
	require.Equal(t, sent.Events, st.Events, "the recorded envelopes")

	code, _ = f.post(t, intentBody(t, "u-1", "UnfollowArtist", "user-1", map[string]any{"artistId": "x"}))
	require.Equal(t, http.StatusOK, code)
	code, body = f.do(t, http.MethodGet, "/v1/intents/u-1", "")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"intentId":"u-1","status":"rejected","rule":"following","reason":"not following x"}`, string(body))

	code, body = f.do(t, http.MethodGet, "/v1/intents/"+strings.Repeat("i", 201), "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, decode(t, body).Error, "intentId is 201 bytes")
	code, _ = f.do(t, http.MethodGet, "/v1/intents/a%00b", "")
	require.Equal(t, http.StatusBadRequest, code)
}
