package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/ledger"
	"github.com/causet/projection-retry/projection"
)

// The write path's scenarios (11-13) run the whole pipeline as real
// processes: `causet runtime` (POST /v1/intents → the PostgreSQL ledger),
// `causet relay` (ledger → causet.events.v1), `causet bridge` and `causet
// worker` (events → the example read models artist_followers and
// artist_stats), in the default configuration. Intents are the examples'
// FollowArtist, UnfollowArtist and PlayTrack (examples/intents), submitted
// with client.Submit by 64 concurrent callers over a few hundred entities.
//
// The verdict of every scenario:
//
//   - intents: each submitted intent was answered SUCCESS or REJECTED, is
//     recorded exactly once in causet_intents with that status, and a
//     SUCCESS carries exactly the events the ledger holds for the intent;
//   - topic: every ledger event is on the events topic, keyed by its entity,
//     equal to the ledger's envelope; per (forkId, entityId) the first
//     appearances come in sequence order 1, 2, 3 …; a repeated eventId is a
//     re-send of the same bytes (counted as resends), nothing else repeats
//     and nothing the ledger does not hold is there;
//   - read models: once the bridge has committed to the end and the dedupe
//     ledger holds every event, artist_followers and artist_stats equal what
//     the ledger's events give when applied per entity in sequence order.

const wpFork = "production"

// wpIntents is the generated intent stream: users are the entities; each
// user follows and unfollows among four artists of its own (so follows
// are often refused as "already following" and unfollows accepted), and
// plays any of the artists. An artist's plays are always a multiple of its
// own plays-per-day figure times the days, so artist_stats.plays_per_day
// (overwritten by every TRACK_PLAYED) does not depend on the order in which
// different listeners' events apply.
type wpIntents struct {
	prefix         string
	users, artists int
}

func (g wpIntents) artist(a int) string { return fmt.Sprintf("artist-%d", a) }

func (g wpIntents) perDay(a int) int { return 1 + a%5 }

// intent is intent i of the stream, the same every time.
func (g wpIntents) intent(i int) client.Intent {
	r := rand.New(rand.NewPCG(uint64(i)+1, 0x5eed))
	u := r.IntN(g.users)
	in := client.Intent{IntentID: fmt.Sprintf("%s-in-%06d", g.prefix, i), EntityID: fmt.Sprintf("user-%d", u), ForkID: wpFork}
	own := g.artist((u*7 + r.IntN(4)) % g.artists)
	switch x := r.IntN(10); {
	case x < 4:
		in.IntentType, in.Payload = "FollowArtist", map[string]any{"artistId": own}
	case x < 6:
		in.IntentType, in.Payload = "UnfollowArtist", map[string]any{"artistId": own}
	default:
		a, days := r.IntN(g.artists), 1+r.IntN(3)
		in.IntentType = "PlayTrack"
		in.Payload = map[string]any{"artistId": g.artist(a), "trackId": fmt.Sprintf("track-%d-%d", a, r.IntN(10)),
			"plays": g.perDay(a) * days, "days": days}
	}
	return in
}

func (g wpIntents) slice(from, to int) []client.Intent {
	out := make([]client.Intent, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, g.intent(i))
	}
	return out
}

// writePath is a stack with the write path on it.
type writePath struct {
	*stack
	gen   wpIntents
	rt    *proc
	rtURL string
	// direct, when set, says which records on the events topic another
	// producer wrote straight to Kafka: checkTopic leaves them out.
	direct func(event.Envelope) bool
}

// newWritePath creates the ledger and intent handler schemas, deploys the
// example intent handlers and the example projections (their tables as
// examples/projections has them) on a new stack.
func newWritePath(t *testing.T, o stackOptions) *writePath {
	t.Helper()
	s := newStack(t, o)
	for _, name := range exampleintents.Names() {
		raw, err := exampleintents.Document(name)
		require.NoError(t, err)
		doc, err := intents.Parse(raw)
		require.NoError(t, err, name)
		_, err = intents.Deploy(s.ctx, s.pool, doc)
		require.NoError(t, err, name)
	}
	for _, name := range exampleprojections.Names() {
		ddl, err := exampleprojections.DDL(name)
		require.NoError(t, err)
		_, err = s.pool.Exec(s.ctx, ddl)
		require.NoError(t, err, name)
		raw, err := exampleprojections.Document(name)
		require.NoError(t, err)
		doc, err := projection.Parse(raw)
		require.NoError(t, err, name)
		_, err = projection.Deploy(s.ctx, s.pool, doc)
		require.NoError(t, err, name)
	}
	return &writePath{stack: s, gen: wpIntents{prefix: s.prefix, users: 300, artists: 40}}
}

// wpToken is the runtime's bearer token in the scenarios (both scopes).
const wpToken = "reliability-0123456789abcdef0123456789abcdef"

// startRuntime starts `causet runtime` on a free port, with a bearer token
// as production requires one, and waits until it is ready (its /readyz and
// /metrics are on CAUSET_METRICS_ADDR, apart from the API).
func (w *writePath) startRuntime() *proc {
	w.t.Helper()
	return w.startRuntimeOn(nil)
}

// startRuntimeOn is startRuntime on a test host (nil: this namespace),
// serving on the host's address.
func (w *writePath) startRuntimeOn(h *testenv.Host) *proc {
	w.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(w.t))
	if h != nil {
		addr = fmt.Sprintf("%s:%d", h.IP, testenv.FreePort(w.t))
	}
	p := w.startOn(h, "runtime", map[string]string{"CAUSET_RUNTIME_ADDR": addr, "CAUSET_RUNTIME_TOKENS": "scenarios write,read " + wpToken}, "runtime")
	w.rt, w.rtURL = p, "http://"+addr
	require.Eventually(w.t, func() bool { return httpStatus("http://"+p.metrics+"/readyz") == http.StatusOK }, time.Minute, 100*time.Millisecond,
		"runtime not ready:\n%s", p.logTail(20))
	return p
}

func (w *writePath) relay() *proc { return w.start("relay", nil, "relay") }

// client is a client.Client of the runtime with the default retry
// options (opts added), sharing idle connections among callers.
func (w *writePath) client(callers int, opts ...client.Option) *client.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = callers
	return client.New(w.rtURL, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr}), client.WithToken(wpToken)}, opts...)...)
}

// runtimeCount is causet_runtime_intents_total{status=…} of the runtime.
func (w *writePath) runtimeCount(status string) int {
	return int(w.rt.metric(fmt.Sprintf(`causet_runtime_intents_total{status=%q}`, status)))
}

func httpStatus(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	req.Header.Set("Authorization", "Bearer "+wpToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// wpOutcome is what client.Submit returned for one intent.
type wpOutcome struct {
	res  client.Result
	err  error
	took time.Duration
	end  time.Time // when the answer came
}

// submitPaced submits ins with callers goroutines, intent k not before
// start + k×over/len(ins) (over 0: as fast as they go).
func submitPaced(ctx context.Context, cl *client.Client, ins []client.Intent, callers int, over time.Duration) []wpOutcome {
	return submitAt(ctx, cl, ins, callers, func(k int) time.Duration {
		return time.Duration(int64(over) * int64(k) / int64(len(ins)))
	})
}

// submitWaves submits ins in waves equal parts, wave j starting at
// start + j×every, each as fast as callers goroutines go.
func submitWaves(ctx context.Context, cl *client.Client, ins []client.Intent, callers, waves int, every time.Duration) []wpOutcome {
	return submitAt(ctx, cl, ins, callers, func(k int) time.Duration {
		return time.Duration(k*waves/len(ins)) * every
	})
}

// submitAt submits ins with callers goroutines, intent k not before
// start + notBefore(k); notBefore must not decrease with k.
func submitAt(ctx context.Context, cl *client.Client, ins []client.Intent, callers int, notBefore func(k int) time.Duration) []wpOutcome {
	out := make([]wpOutcome, len(ins))
	start := time.Now()
	inParallel(len(ins), callers, func(k int) {
		time.Sleep(time.Until(start.Add(notBefore(k))))
		t0 := time.Now()
		res, err := cl.Submit(ctx, ins[k])
		out[k] = wpOutcome{res: res, err: err, took: time.Since(t0), end: time.Now()}
	})
	return out
}

// inParallel calls fn(k) for every k in [0, n) from callers goroutines,
// each taking the next k when it is free, and returns when all are done.
func inParallel(n, callers int, fn func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				fn(k)
			}
		})
	}
	wg.Wait()
}

// slowest is the longest Submit of outs.
func slowest(outs []wpOutcome) time.Duration {
	var m time.Duration
	for _, o := range outs {
		m = max(m, o.took)
	}
	return m
}

// ---------------------------------------------------------------- ledger

// ledgerEvent is one row of causet_events.
type ledgerEvent struct {
	position  int64
	env       event.Envelope
	published bool
}

func (w *writePath) ledgerEvents() []ledgerEvent {
	w.t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT position, envelope::text, published_at IS NOT NULL FROM causet_events ORDER BY position`)
	require.NoError(w.t, err)
	defer rows.Close()
	var out []ledgerEvent
	for rows.Next() {
		var e ledgerEvent
		var raw string
		require.NoError(w.t, rows.Scan(&e.position, &raw, &e.published))
		require.NoError(w.t, json.Unmarshal([]byte(raw), &e.env), "ledger envelope %s", raw)
		out = append(out, e)
	}
	require.NoError(w.t, rows.Err())
	return out
}

// unpublished counts ledger events the relay has not marked (-1 when the
// database does not answer).
func (w *writePath) unpublished() int {
	return w.tryCount(`SELECT count(*) FROM causet_events e WHERE published_at IS NULL
AND NOT EXISTS (SELECT 1 FROM causet_events_set_aside s WHERE s.position = e.position)`)
}

// setAside are the positions of the events the relay set aside.
func (w *writePath) setAside() map[int64]bool {
	w.t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT position FROM causet_events_set_aside`)
	require.NoError(w.t, err)
	out := map[int64]bool{}
	for rows.Next() {
		var p int64
		require.NoError(w.t, rows.Scan(&p))
		out[p] = true
	}
	require.NoError(w.t, rows.Err())
	return out
}

// waitPublished waits until the relay has marked every ledger event.
func (w *writePath) waitPublished(within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within {
		if w.unpublished() == 0 {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), false
}

// markHold holds row locks on unpublished ledger events so that the
// relay's mark of a batch Kafka acknowledged waits on them: the relay is
// then between produce and mark, where a kill leaves written records
// unmarked. That window is otherwise a fraction of a millisecond.
type markHold struct {
	tx     pgx.Tx
	pid    int // the relay's session, waiting in its UPDATE
	locked int
}

// holdMark waits until some events are unpublished, locks them (SKIP
// LOCKED: rows the relay is marking are left to it) and waits until the
// relay's UPDATE waits on them. nil when that does not happen within.
func (w *writePath) holdMark(within time.Duration) *markHold {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if w.unpublished() <= 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		tx, err := w.pool.Begin(w.ctx)
		require.NoError(w.t, err)
		h := &markHold{tx: tx}
		err = tx.QueryRow(w.ctx, `SELECT count(*) FROM (SELECT 1 FROM causet_events WHERE published_at IS NULL FOR UPDATE SKIP LOCKED) l`).Scan(&h.locked)
		if err != nil || h.locked == 0 {
			_ = tx.Rollback(w.ctx)
			continue
		}
		for time.Now().Before(deadline) {
			err := w.pool.QueryRow(w.ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND query LIKE 'UPDATE causet_events SET published_at%' LIMIT 1`).Scan(&h.pid)
			if err == nil {
				return h
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = tx.Rollback(w.ctx)
	}
	return nil
}

// release ends the (killed) relay's session, whose UPDATE would otherwise
// commit once the locks are gone, then releases the locks.
func (h *markHold) release(w *writePath) {
	w.t.Helper()
	_, err := w.pool.Exec(w.ctx, `SELECT pg_terminate_backend($1)`, h.pid)
	require.NoError(w.t, err)
	require.Eventually(w.t, func() bool {
		return w.countSQL(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, h.pid) == 0
	}, 10*time.Second, 5*time.Millisecond, "the killed relay's session ends")
	require.NoError(w.t, h.tx.Rollback(w.ctx))
}

// recordedIntent is one row of causet_intents with its events' IDs.
type recordedIntent struct {
	status string
	events []string
}

func (w *writePath) recordedIntents() map[string]recordedIntent {
	w.t.Helper()
	rows, err := w.pool.Query(w.ctx, `
		SELECT i.intent_id, i.status, coalesce(array_agg(e.event_id ORDER BY e.sequence) FILTER (WHERE e.event_id IS NOT NULL), '{}')
		FROM causet_intents i LEFT JOIN causet_events e ON e.intent_id = i.intent_id GROUP BY 1, 2`)
	require.NoError(w.t, err)
	defer rows.Close()
	out := map[string]recordedIntent{}
	for rows.Next() {
		var id string
		var ri recordedIntent
		require.NoError(w.t, rows.Scan(&id, &ri.status, &ri.events))
		out[id] = ri
	}
	require.NoError(w.t, rows.Err())
	return out
}

// intentCheck compares the client's answers with causet_intents.
type intentCheck struct {
	submitted, success, rejected, failed    int
	recorded, missing, unexpected, mismatch int
	examples                                []string
}

func (c *intentCheck) example(format string, args ...any) {
	if len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

// checkIntents requires nothing: it counts. Every intent of ins must have
// been answered (outs[k] for ins[k]) and be recorded once with the answer's
// status and events; the ledger must hold no other intent.
func (w *writePath) checkIntents(ins []client.Intent, outs []wpOutcome) intentCheck {
	rec := w.recordedIntents()
	c := intentCheck{submitted: len(ins), recorded: len(rec)}
	submitted := map[string]bool{}
	for k, in := range ins {
		submitted[in.IntentID] = true
		o := outs[k]
		ri, ok := rec[in.IntentID]
		if !ok {
			c.missing++
			c.example("%s not in the ledger (answer %q, err %v)", in.IntentID, o.res.Status, o.err)
		}
		switch {
		case o.err != nil:
			c.failed++
			c.example("%s: %v", in.IntentID, o.err)
			continue
		case o.res.Status == client.ResultSuccess:
			c.success++
			ids := eventIDs(o.res)
			if ok && (ri.status != ledger.RecordedSucceeded || !reflect.DeepEqual(ids, ri.events) || len(ids) != 1) {
				c.mismatch++
				c.example("%s: answered SUCCESS with %v, ledger %s with %v", in.IntentID, ids, ri.status, ri.events)
			}
		case o.res.Status == client.ResultRejected:
			c.rejected++
			if ok && (ri.status != ledger.RecordedRejected || len(ri.events) != 0) {
				c.mismatch++
				c.example("%s: answered REJECTED, ledger %s with %v", in.IntentID, ri.status, ri.events)
			}
		default:
			c.failed++
			c.example("%s: answer %q", in.IntentID, o.res.Status)
		}
	}
	for id := range rec {
		if !submitted[id] {
			c.unexpected++
			c.example("%s in the ledger, never submitted", id)
		}
	}
	return c
}

func (r *result) intents(c intentCheck) {
	r.fig("intents", c.submitted)
	r.fig("intents_success", c.success)
	r.fig("intents_rejected", c.rejected)
	r.fig("intents_unanswered", c.failed)
	r.fig("intents_recorded", c.recorded)
	r.fig("intents_missing", c.missing)
	r.fig("intents_unexpected", c.unexpected)
	r.fig("intents_answer_mismatch", c.mismatch)
	r.lost += c.missing
	r.double += c.unexpected
	require.Zero(r.t, c.failed, "intents without a SUCCESS or REJECTED answer, e.g. %v", c.examples)
	require.Zero(r.t, c.missing, "answered intents missing from the ledger, e.g. %v", c.examples)
	require.Zero(r.t, c.unexpected, "ledger intents nobody submitted, e.g. %v", c.examples)
	require.Zero(r.t, c.mismatch, "answers that differ from the ledger, e.g. %v", c.examples)
	require.Equal(r.t, c.submitted, c.recorded, "every intent recorded exactly once")
}

// ---------------------------------------------------------------- topic

// readTopic reads a topic from the start up to its current end offsets, in
// partition then offset order.
func (s *stack) readTopic(topic string) []*kgo.Record {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	recs, _ := testenv.ReadTopic(s.t, ctx, s.brokers, topic)
	return recs
}

// topicCheck compares the events topic with the ledger.
type topicCheck struct {
	records, distinct, resends                int
	missing, unknown, badResends, orderBreaks int
	keyMismatch, valueMismatch, undecodable   int
	examples                                  []string
}

func (c *topicCheck) example(format string, args ...any) {
	if len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

// checkTopic reads the events topic and compares it with evs, the ledger.
func (w *writePath) checkTopic(evs []ledgerEvent) topicCheck {
	recs := w.readTopic(w.topic)
	want := make(map[string]event.Envelope, len(evs))
	for _, e := range evs {
		want[e.env.EventID] = e.env
	}
	c := topicCheck{}
	first := map[string][]byte{}
	// An entity's events must first appear in the order of their sequence
	// numbers among evs (which leaves out events set aside: a gap there is
	// no break).
	seqs := map[[2]string][]int64{}
	for _, e := range evs {
		k := [2]string{e.env.ForkID, e.env.EntityID}
		seqs[k] = append(seqs[k], e.env.Sequence)
	}
	for _, s := range seqs {
		slices.Sort(s)
	}
	next := map[[2]string]int{} // index in seqs of the sequence due next
	for _, rec := range recs {
		env, err := event.Decode(rec.Value)
		if err == nil && w.direct != nil && w.direct(env) {
			continue
		}
		c.records++
		if err != nil {
			c.undecodable++
			c.example("p%d@%d: %v", rec.Partition, rec.Offset, err)
			continue
		}
		if string(rec.Key) != env.EntityID {
			c.keyMismatch++
			c.example("p%d@%d: key %q, entity %q", rec.Partition, rec.Offset, rec.Key, env.EntityID)
		}
		if v, ok := first[env.EventID]; ok {
			c.resends++
			if !bytes.Equal(v, rec.Value) {
				c.badResends++
				c.example("%s repeated with other bytes at p%d@%d", env.EventID, rec.Partition, rec.Offset)
			}
			continue
		}
		first[env.EventID] = rec.Value
		l, ok := want[env.EventID]
		if !ok {
			c.unknown++
			c.example("%s on the topic, not in the ledger", env.EventID)
			continue
		}
		if !sameEnvelope(l, env) {
			c.valueMismatch++
			c.example("%s differs from the ledger: %s", env.EventID, rec.Value)
		}
		k := [2]string{env.ForkID, env.EntityID}
		at, _ := slices.BinarySearch(seqs[k], env.Sequence)
		if at != next[k] {
			c.orderBreaks++
			c.example("%s/%s: sequence %d first appears after %d of its %d (p%d@%d)", env.ForkID, env.EntityID, env.Sequence, next[k], len(seqs[k]), rec.Partition, rec.Offset)
		}
		next[k] = max(next[k], at+1)
	}
	c.distinct = len(first)
	for id := range want {
		if _, ok := first[id]; !ok {
			c.missing++
			c.example("%s in the ledger, not on the topic", id)
		}
	}
	return c
}

func sameEnvelope(a, b event.Envelope) bool {
	var pa, pb any
	if json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || !reflect.DeepEqual(pa, pb) {
		return false
	}
	return a.EventID == b.EventID && a.EventType == b.EventType && a.EntityID == b.EntityID && a.ForkID == b.ForkID &&
		a.IntentID == b.IntentID && a.Sequence == b.Sequence && a.OccurredAt.Equal(b.OccurredAt)
}

func (r *result) topic(c topicCheck, ledgerEvents int) {
	r.fig("ledger_events", ledgerEvents)
	r.fig("topic_records", c.records)
	r.fig("topic_events", c.distinct)
	r.fig("resends", c.resends)
	r.fig("topic_missing", c.missing)
	r.fig("topic_unknown", c.unknown)
	r.fig("topic_order_breaks", c.orderBreaks)
	r.lost += c.missing
	r.double += c.badResends
	require.Zero(r.t, c.undecodable, "undecodable records, e.g. %v", c.examples)
	require.Zero(r.t, c.missing, "ledger events missing from the topic, e.g. %v", c.examples)
	require.Zero(r.t, c.unknown, "topic events the ledger does not hold, e.g. %v", c.examples)
	require.Zero(r.t, c.badResends, "a repeated eventId with other bytes, e.g. %v", c.examples)
	require.Zero(r.t, c.keyMismatch, "records not keyed by their entity, e.g. %v", c.examples)
	require.Zero(r.t, c.valueMismatch, "records that differ from the ledger, e.g. %v", c.examples)
	require.Zero(r.t, c.orderBreaks, "an entity's events first appear out of sequence order, e.g. %v", c.examples)
	require.Equal(r.t, ledgerEvents, c.distinct, "every ledger event on the topic")
}

// ---------------------------------------------------------------- read models

// projected counts, per example projection, the events its dedupe ledger
// holds as applied.
func (w *writePath) projected(projection string) int {
	return w.tryCount(fmt.Sprintf(`SELECT count(*) FROM causet_projection_applied WHERE projection = '%s'`, projection))
}

// eventCounts are the ledger's events per example projection.
func eventCounts(evs []ledgerEvent) (followers, stats int) {
	for _, e := range evs {
		switch e.env.EventType {
		case "ARTIST_FOLLOWED", "ARTIST_UNFOLLOWED":
			followers++
		case "TRACK_PLAYED":
			stats++
		}
	}
	return followers, stats
}

// waitProjected waits until the bridge has committed every partition to its
// end and the dedupe ledger holds every event of evs.
func (w *writePath) waitProjected(evs []ledgerEvent, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	f, st := eventCounts(evs)
	for time.Since(start) < within {
		if w.projected("artist_followers") >= f && w.projected("artist_stats") >= st && w.committedToEnd() {
			return time.Since(start), true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start), false
}

// modelCheck compares the read models with what the ledger's events give.
type modelCheck struct {
	followerEvents, statEvents                  int
	appliedFollowers, appliedStats              int
	followsExpected, followsActual, followsDiff int
	artistsExpected, artistsDiff                int
	playsExpected, playsActual                  int64
	playsOver                                   int
	examples                                    []string
}

func (c *modelCheck) example(format string, args ...any) {
	if len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

type wpPlay struct {
	Plays int64 `json:"plays"`
	Days  int64 `json:"days"`
}

func (w *writePath) checkReadModels(evs []ledgerEvent) modelCheck {
	w.t.Helper()
	var c modelCheck
	c.followerEvents, c.statEvents = eventCounts(evs)
	c.appliedFollowers, c.appliedStats = w.projected("artist_followers"), w.projected("artist_stats")
	// Apply the ledger's events per entity in sequence order.
	sorted := append([]ledgerEvent(nil), evs...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i].env, sorted[j].env
		if a.EntityID != b.EntityID {
			return a.EntityID < b.EntityID
		}
		return a.Sequence < b.Sequence
	})
	type pair struct{ user, artist string }
	follows := map[pair]time.Time{}
	plays, perDay := map[string]int64{}, map[string]int64{}
	for _, e := range sorted {
		var pl struct {
			ArtistID string `json:"artistId"`
			wpPlay
		}
		require.NoError(w.t, json.Unmarshal(e.env.Payload, &pl))
		k := pair{e.env.EntityID, pl.ArtistID}
		switch e.env.EventType {
		case "ARTIST_FOLLOWED":
			follows[k] = e.env.OccurredAt
		case "ARTIST_UNFOLLOWED":
			delete(follows, k)
		case "TRACK_PLAYED":
			plays[pl.ArtistID] += pl.Plays
			d := pl.Plays / pl.Days
			if v, ok := perDay[pl.ArtistID]; ok && v != d {
				c.example("artist %s: plays per day %d and %d (the stream should keep it constant)", pl.ArtistID, v, d)
			}
			perDay[pl.ArtistID] = d
		}
	}
	c.followsExpected, c.artistsExpected = len(follows), len(plays)
	for _, p := range plays {
		c.playsExpected += p
	}

	rows, err := w.pool.Query(w.ctx, `SELECT user_id, artist_id, followed_at FROM artist_followers`)
	require.NoError(w.t, err)
	seen := map[pair]bool{}
	for rows.Next() {
		var k pair
		var at time.Time
		require.NoError(w.t, rows.Scan(&k.user, &k.artist, &at))
		c.followsActual++
		seen[k] = true
		want, ok := follows[k]
		switch {
		case !ok:
			c.followsDiff++
			c.example("artist_followers has %s→%s, the ledger's events do not", k.user, k.artist)
		case !want.Truncate(time.Microsecond).Equal(at):
			c.followsDiff++
			c.example("artist_followers %s→%s followed_at %s, want %s", k.user, k.artist, at.UTC(), want.UTC())
		}
	}
	rows.Close()
	require.NoError(w.t, rows.Err())
	for k := range follows {
		if !seen[k] {
			c.followsDiff++
			c.example("artist_followers lacks %s→%s", k.user, k.artist)
		}
	}

	rows, err = w.pool.Query(w.ctx, `SELECT artist_id, plays, coalesce(plays_per_day, -1) FROM artist_stats`)
	require.NoError(w.t, err)
	seenA := map[string]bool{}
	for rows.Next() {
		var a string
		var p, d int64
		require.NoError(w.t, rows.Scan(&a, &p, &d))
		seenA[a] = true
		c.playsActual += p
		if p > plays[a] {
			c.playsOver++
		}
		if p != plays[a] || d != perDay[a] {
			c.artistsDiff++
			c.example("artist_stats %s: plays %d, plays_per_day %d; want %d, %d", a, p, d, plays[a], perDay[a])
		}
	}
	rows.Close()
	require.NoError(w.t, rows.Err())
	for a := range plays {
		if !seenA[a] {
			c.artistsDiff++
			c.example("artist_stats lacks %s", a)
		}
	}
	return c
}

func (r *result) readModels(c modelCheck) {
	r.fig("follower_events", c.followerEvents)
	r.fig("stats_events", c.statEvents)
	r.fig("applied_followers", c.appliedFollowers)
	r.fig("applied_stats", c.appliedStats)
	r.fig("artist_followers_rows", c.followsActual)
	r.fig("artist_followers_expected", c.followsExpected)
	r.fig("artist_followers_diff", c.followsDiff)
	r.fig("artist_stats_rows", c.artistsExpected)
	r.fig("artist_stats_diff", c.artistsDiff)
	r.fig("plays", c.playsActual)
	r.fig("plays_expected", c.playsExpected)
	r.lost += max(c.followerEvents-c.appliedFollowers, 0) + max(c.statEvents-c.appliedStats, 0)
	r.double += c.playsOver
	require.Equal(r.t, c.followerEvents, c.appliedFollowers, "every follow/unfollow event applied once (dedupe ledger)")
	require.Equal(r.t, c.statEvents, c.appliedStats, "every play event applied once (dedupe ledger)")
	require.Zero(r.t, c.followsDiff, "artist_followers differs from the ledger's events, e.g. %v", c.examples)
	require.Zero(r.t, c.artistsDiff, "artist_stats differs from the ledger's events, e.g. %v", c.examples)
	require.Equal(r.t, c.playsExpected, c.playsActual)
}

// settle waits until the relay has published every ledger event and the
// bridge applied them, then checks topic and read models; it also checks
// that nothing was dead-lettered and counts retry workflows (the example
// events never fail, so any would be a transient failure retried).
func (w *writePath) settle(r *result, within time.Duration) ([]ledgerEvent, topicCheck) {
	w.t.Helper()
	d, ok := w.waitPublished(within)
	require.True(w.t, ok, "the relay did not publish every ledger event within %s: %d unpublished", within, w.unpublished())
	r.fig("publish_drain_s", d.Round(100*time.Millisecond).Seconds())
	// Events the relay set aside (Kafka refuses them) are not on the topic:
	// the checks are of every other event.
	evs := slices.DeleteFunc(w.ledgerEvents(), func(e ledgerEvent) bool { return w.setAside()[e.position] })
	tc := w.checkTopic(evs)
	r.topic(tc, len(evs))
	d, ok = w.waitProjected(evs, within)
	require.True(w.t, ok, "the bridge did not apply every event within %s: %s; applied followers %d, stats %d",
		within, w.progress(), w.projected("artist_followers"), w.projected("artist_stats"))
	r.fig("project_drain_s", d.Round(100*time.Millisecond).Seconds())
	r.readModels(w.checkReadModels(evs))
	r.fig("dlq_records", len(w.readDLQ()))
	wfs := w.workflowsOnQueue(contract.RetryWorkflowName)
	r.fig("retry_workflows", len(wfs))
	runs := map[string]int{}
	for _, e := range wfs {
		runs[e.ID]++
		if runs[e.ID] > 1 {
			r.dupWF++
		}
	}
	require.Zero(w.t, len(w.readDLQ()), "dead letters: the example events never fail")
	require.Zero(w.t, r.dupWF, "duplicate workflow runs")
	return evs, tc
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func durS(d time.Duration) float64 { return d.Round(100 * time.Millisecond).Seconds() }

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
