package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/backoff"
)

const ms = time.Millisecond

// sleepLog records the waits a client asked for instead of waiting.
type sleepLog struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleepLog) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepLog) waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration{}, s.d...)
}

// testClient returns a client of srv whose waits are recorded, not slept,
// and are the backoff ceilings themselves (no jitter), so the schedule is
// exact.
func testClient(srv *httptest.Server, opts ...Option) (*Client, *sleepLog) {
	c := New(srv.URL, append([]Option{WithHTTPClient(srv.Client())}, opts...)...)
	log := &sleepLog{}
	c.sleep = log.sleep
	c.jitter = func(d time.Duration) time.Duration { return d }
	return c, log
}

// refuseFirst fails the first request as a refused connection: it never
// reaches the runtime.
type refuseFirst struct {
	mu   sync.Mutex
	done bool
	next http.RoundTripper
}

func (r *refuseFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	first := !r.done
	r.done = true
	r.mu.Unlock()
	if first {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

func follow(id string) Intent {
	return Intent{IntentID: id, IntentType: "ARTIST_FOLLOW", EntityID: "user-1", ForkID: "production",
		Payload: map[string]any{"artistId": "artist-9"}}
}

func isHTTP(code int, msg string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		var he *HTTPError
		require.ErrorAs(t, err, &he)
		require.Equal(t, code, he.StatusCode)
		require.Contains(t, he.Message, msg)
		require.NotErrorIs(t, err, ErrGaveUp)
	}
}

func gaveUp(tries int, last func(*testing.T, error)) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		require.ErrorIs(t, err, ErrGaveUp)
		require.NotErrorIs(t, err, ErrOutcomeUnknown)
		var g *GaveUpError
		require.ErrorAs(t, err, &g)
		require.Equal(t, tries, g.Tries)
		require.ErrorContains(t, err, "gave up after")
		last(t, g.Err)
	}
}

func TestSubmit(t *testing.T) {
	const hang = 400 * ms // request timeout of the cases where the runtime never answers
	times := func(s step, n int) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	tests := []struct {
		name         string
		intent       Intent
		posts, gets  []step
		opts         []Option
		transport    func(http.RoundTripper) http.RoundTripper
		want         string // Result.Status; "" when Submit fails
		wantErr      func(*testing.T, error)
		wantPosts    int // POSTs the runtime received
		wantGets     int // status checks the runtime received
		wantRecorded int
		wantWaits    []time.Duration
	}{
		{name: "5xx twice, then SUCCESS", posts: []step{fail503, fail500},
			want: ResultSuccess, wantPosts: 3, wantRecorded: 1, wantWaits: []time.Duration{100 * ms, 200 * ms}},
		{name: "429, then SUCCESS", posts: []step{throttle},
			want: ResultSuccess, wantPosts: 2, wantRecorded: 1, wantWaits: []time.Duration{100 * ms}},
		{name: "timeout after the commit: status succeeded, not re-submitted", posts: []step{hangAfter},
			opts: []Option{WithRequestTimeout(hang)},
			want: ResultSuccess, wantPosts: 1, wantGets: 1, wantRecorded: 1},
		{name: "timeout before the commit: status unknown, re-submitted once", posts: []step{hangBefore},
			opts: []Option{WithRequestTimeout(hang)},
			want: ResultSuccess, wantPosts: 2, wantGets: 1, wantRecorded: 1, wantWaits: []time.Duration{100 * ms}},
		{name: "connection reset before the commit: re-submitted once", posts: []step{resetBefore},
			want: ResultSuccess, wantPosts: 2, wantGets: 1, wantRecorded: 1, wantWaits: []time.Duration{100 * ms}},
		{name: "connection reset after the commit: not re-submitted", posts: []step{resetAfter},
			want: ResultSuccess, wantPosts: 1, wantGets: 1, wantRecorded: 1},
		{name: "504 after the commit: outcome unknown, status succeeded, not re-submitted", posts: []step{unknown504},
			want: ResultSuccess, wantPosts: 1, wantGets: 1, wantRecorded: 1},
		{name: "409 in progress: re-submitted after a backoff", posts: []step{inProgress409},
			want: ResultSuccess, wantPosts: 2, wantRecorded: 1, wantWaits: []time.Duration{100 * ms}},
		{name: "connection refused: re-submitted without a status check",
			transport: func(rt http.RoundTripper) http.RoundTripper { return &refuseFirst{next: rt} },
			want:      ResultSuccess, wantPosts: 1, wantRecorded: 1, wantWaits: []time.Duration{100 * ms}},
		{name: "REJECTED is returned, not retried", intent: Intent{IntentType: "REJECT"},
			want: ResultRejected, wantPosts: 1, wantRecorded: 1},
		{name: "REJECTED answer lost: status rejected, not re-submitted", intent: Intent{IntentType: "REJECT"},
			posts: []step{hangAfter}, opts: []Option{WithRequestTimeout(hang)},
			want: ResultRejected, wantPosts: 1, wantGets: 1, wantRecorded: 1},
		{name: "400 is not retried", intent: Intent{EntityID: "-"},
			wantErr: isHTTP(400, "intentId and entityId are required"), wantPosts: 1},
		{name: "422 is not retried", intent: Intent{IntentType: "BROKEN"},
			wantErr: isHTTP(422, "handler BROKEN"), wantPosts: 1},
		{name: "422 after a 503 ends the retries", intent: Intent{IntentType: "BROKEN"}, posts: []step{fail503},
			wantErr: isHTTP(422, "handler BROKEN"), wantPosts: 2, wantWaits: []time.Duration{100 * ms}},
		{name: "status check fails 3 times, then says succeeded", posts: []step{hangAfter},
			gets: times(fail503, 3), opts: []Option{WithRequestTimeout(hang)},
			want: ResultSuccess, wantPosts: 1, wantGets: 4, wantRecorded: 1,
			wantWaits: []time.Duration{100 * ms, 200 * ms, 400 * ms}},
		{name: "status check times out, then says unknown: re-submitted once", posts: []step{hangBefore},
			gets: []step{hangBefore}, opts: []Option{WithRequestTimeout(hang)},
			want: ResultSuccess, wantPosts: 2, wantGets: 2, wantRecorded: 1,
			wantWaits: []time.Duration{100 * ms, 100 * ms}},
		{name: "status check gives up: outcome unknown, not re-submitted", posts: []step{hangBefore},
			gets: times(fail503, 5), opts: []Option{WithRequestTimeout(hang)},
			wantErr: func(t *testing.T, err error) {
				require.ErrorIs(t, err, ErrOutcomeUnknown)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorIs(t, err, ErrGaveUp)
				require.ErrorContains(t, err, "no answer within the request timeout")
				require.ErrorContains(t, err, "status check failed: gave up after 5 tries: GET /v1/intents/")
			},
			wantPosts: 1, wantGets: 5, wantWaits: []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}},
		{name: "max tries spent: ErrGaveUp with the tries and the last 503", posts: times(fail503, 5),
			wantErr:   gaveUp(5, isHTTP(503, "ledger write failed")),
			wantPosts: 5, wantWaits: []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}},
		{name: "max tries 2", posts: []step{fail503, fail500}, opts: []Option{WithMaxTries(2)},
			wantErr: gaveUp(2, isHTTP(500, "internal error")), wantPosts: 2, wantWaits: []time.Duration{100 * ms}},
		{name: "every try times out before the commit: gives up after 5", posts: times(hangBefore, 5),
			opts: []Option{WithRequestTimeout(hang)},
			wantErr: gaveUp(5, func(t *testing.T, err error) {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorContains(t, err, "status check says it is not recorded")
			}),
			wantPosts: 5, wantGets: 5, wantWaits: []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}},
		{name: "backoff grows by the multiplier and stops at the cap", posts: times(fail503, 6),
			opts:      []Option{WithMaxTries(7), WithBackoff(50*ms, 3, time.Second)},
			want:      ResultSuccess,
			wantPosts: 7, wantRecorded: 1,
			wantWaits: []time.Duration{50 * ms, 150 * ms, 450 * ms, time.Second, time.Second, time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFakeRuntime(t, tc.posts, tc.gets)
			opts := tc.opts
			if tc.transport != nil {
				opts = append(opts, WithTransport(tc.transport(srv.Client().Transport)))
			}
			c, log := testClient(srv, opts...)
			in := follow("intent-1")
			if tc.intent.IntentType != "" {
				in.IntentType = tc.intent.IntentType
			}
			if tc.intent.EntityID == "-" {
				in.EntityID = ""
			}

			res, err := c.Submit(context.Background(), in)

			posts, gets, recorded := f.counts()
			require.Equal(t, tc.wantPosts, posts, "POSTs")
			require.Equal(t, tc.wantGets, gets, "status checks")
			require.Equal(t, tc.wantRecorded, recorded, "recorded intents")
			require.Equal(t, tc.wantWaits, nilIfEmpty(log.waits()), "waits")
			if tc.wantErr != nil {
				require.Error(t, err)
				tc.wantErr(t, err)
				require.Equal(t, Result{}, res)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Status)
			switch res.Status {
			case ResultSuccess:
				require.Len(t, res.Events, 1)
				require.Equal(t, "intent-1:1", res.Events[0].EventID)
				require.Equal(t, "user-1", res.Events[0].EntityID)
				require.JSONEq(t, `{"artistId":"artist-9"}`, string(res.Events[0].Payload))
			case ResultRejected:
				require.Equal(t, "no_self_follow", res.Rule)
				require.Equal(t, "a user cannot follow itself", res.Reason)
				require.Empty(t, res.Events)
			}
			for _, got := range f.intents() {
				require.Equal(t, "intent-1", got.IntentID, "every try carries the same intentId")
			}
		})
	}
}

func nilIfEmpty(d []time.Duration) []time.Duration {
	if len(d) == 0 {
		return nil
	}
	return d
}

func TestSubmitContextCancelledDuringBackoff(t *testing.T) {
	f, srv := newFakeRuntime(t, []step{fail503}, nil)
	c := New(srv.URL, WithHTTPClient(srv.Client()), WithBackoff(time.Hour, 2, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan time.Duration, 1)
	c.sleep = func(ctx context.Context, d time.Duration) error {
		waiting <- d
		return backoff.Sleep(ctx, d) // the real wait
	}
	go func() {
		<-waiting
		cancel()
	}()

	start := time.Now()
	_, err := c.Submit(ctx, follow("intent-1"))

	require.Less(t, time.Since(start), time.Minute, "the hour-long wait ended with the context")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrOutcomeUnknown, "the 503 said nothing was written")
	require.ErrorContains(t, err, "while waiting to retry, after 1 tries; the last: POST /v1/intents: 503")
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	posts, gets, recorded := f.counts()
	require.Equal(t, []int{1, 0, 0}, []int{posts, gets, recorded})
}

func TestSubmitContextCancelledDuringRequest(t *testing.T) {
	f, srv := newFakeRuntime(t, []step{hangBefore}, nil)
	c, _ := testClient(srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if posts, _, _ := f.counts(); posts == 1 {
				cancel()
				return
			}
			time.Sleep(ms)
		}
	}()

	_, err := c.Submit(ctx, follow("intent-1"))

	require.ErrorIs(t, err, ErrOutcomeUnknown, "the request reached the runtime")
	require.ErrorIs(t, err, context.Canceled)
	posts, gets, _ := f.counts()
	require.Equal(t, []int{1, 0}, []int{posts, gets}, "no status check once the context ended")
}

func TestBackoffSchedule(t *testing.T) {
	c := New("http://127.0.0.1:1")
	var ceilings []time.Duration
	for n := 1; n <= 9; n++ {
		ceilings = append(ceilings, c.ceiling(n))
	}
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms,
		5 * time.Second, 5 * time.Second, 5 * time.Second}, ceilings, "defaults: 100 ms, 2x, 5 s cap")
	require.Equal(t, 5*time.Second, c.ceiling(1000), "no overflow far past the cap")

	// Full jitter: every wait within [0, ceiling], and spread over it.
	for n := 1; n <= 8; n++ {
		ceil := c.ceiling(n)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := fullJitter(ceil)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceil)
			require.LessOrEqual(t, d, DefaultMaxBackoff)
			seen[d] = true
		}
		require.Greater(t, len(seen), 100, "waits before retry %d are spread", n)
	}
	require.Zero(t, fullJitter(0))
}

func TestStatus(t *testing.T) {
	_, srv := newFakeRuntime(t, nil, []step{fail503})
	c, log := testClient(srv)
	ctx := context.Background()

	st, err := c.Status(ctx, "a/b:1")
	require.NoError(t, err)
	require.Equal(t, IntentStatus{IntentID: "a/b:1", Status: StateUnknown}, st, "the ID is escaped in the path")
	require.Equal(t, []time.Duration{100 * ms}, log.waits(), "the first GET's 503 was retried")

	_, err = c.Submit(ctx, follow("a/b:1"))
	require.NoError(t, err)
	st, err = c.Status(ctx, "a/b:1")
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, st.Status)
	require.Len(t, st.Events, 1)

	_, err = c.Status(ctx, "")
	require.ErrorContains(t, err, "intentID is required")
}

func TestSubmitRefusesBadInput(t *testing.T) {
	f, srv := newFakeRuntime(t, nil, nil)
	ctx := context.Background()
	c, _ := testClient(srv)

	in := follow("")
	_, err := c.Submit(ctx, in)
	require.ErrorContains(t, err, "intentId is required")

	for _, p := range []any{nil, []int{1}, "text", 3} {
		in := follow("intent-1")
		in.Payload = p
		_, err := c.Submit(ctx, in)
		require.ErrorContains(t, err, "payload must be a JSON object")
	}
	in = follow("intent-1")
	in.Payload = map[string]any{"bad": make(chan int)}
	_, err = c.Submit(ctx, in)
	require.ErrorContains(t, err, "payload: json: unsupported type")

	for _, tc := range []struct {
		base string
		opt  Option
		want string
	}{
		{"127.0.0.1:8080", nil, "base URL"},
		{"ftp://host", nil, `base URL "ftp://host": want http://host:port`},
		{srv.URL, WithMaxTries(0), "WithMaxTries(0): want at least 1"},
		{srv.URL, WithBackoff(time.Second, 0.5, time.Minute), "want initial ≥ 0, a finite multiplier ≥ 1"},
		{srv.URL, WithBackoff(time.Second, 2, time.Millisecond), "max ≥ initial"},
		{srv.URL, WithRequestTimeout(-1), "WithRequestTimeout(-1ns)"},
		{srv.URL, WithHTTPClient(nil), "nil *http.Client"},
		{srv.URL, WithTransport(nil), "nil http.RoundTripper"},
	} {
		var opts []Option
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		c := New(tc.base, opts...)
		_, err := c.Submit(ctx, follow("intent-1"))
		require.ErrorContains(t, err, tc.want)
		_, err = c.Status(ctx, "intent-1")
		require.ErrorContains(t, err, tc.want)
	}
	posts, gets, _ := f.counts()
	require.Equal(t, []int{0, 0}, []int{posts, gets}, "nothing was sent")
}

func TestHTTPErrorMessage(t *testing.T) {
	e := httpError("POST", "/v1/intents", 400, []byte(`{"error":"unknown intentType \"X\""}`))
	require.Equal(t, `POST /v1/intents: 400 Bad Request: unknown intentType "X"`, e.Error())
	require.True(t, errors.Is(&GaveUpError{Tries: 2, Err: e}, ErrGaveUp))

	// A proxy's page rather than the runtime's JSON: its start, trimmed.
	e = httpError("GET", "/v1/intents/x", 502, []byte("  <html>bad gateway"+strings.Repeat(".", 1000)))
	require.True(t, strings.HasPrefix(e.Message, "<html>bad gateway..."))
	require.True(t, strings.HasSuffix(e.Message, "…"))
	require.Len(t, e.Message, 300+len("…"))
	require.Equal(t, "GET /v1/intents/x: 504 Gateway Timeout", httpError("GET", "/v1/intents/x", 504, nil).Error())
}
