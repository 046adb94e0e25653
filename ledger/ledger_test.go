package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/ledger"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	ledger *ledger.Ledger
}

// setup gives a fresh database with the ledger schema, the example read
// model artist_followers, the example handlers and extra handler documents.
func setup(t *testing.T, extra ...string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testenv.Postgres(t)
	ddl, err := exampleprojections.DDL("artist_followers")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ddl)
	require.NoError(t, err)
	var docs []string
	for _, name := range exampleintents.Names() {
		b, err := exampleintents.Document(name)
		require.NoError(t, err)
		docs = append(docs, string(b))
	}
	for _, d := range append(docs, extra...) {
		doc, err := intents.Parse([]byte(d))
		require.NoError(t, err)
		_, err = intents.Deploy(ctx, pool, doc)
		require.NoError(t, err)
	}
	cat, err := intents.NewCatalog(ctx, pool, nil)
	require.NoError(t, err)
	return &fixture{ctx: ctx, pool: pool, ledger: ledger.New(pool, cat)}
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func (f *fixture) requireNothingWritten(t *testing.T) {
	t.Helper()
	for _, table := range []string{"causet_intents", "causet_events", "causet_entity_sequences"} {
		require.Zero(t, f.count(t, table), table)
	}
}

func follow(id, user, artist string) intents.Intent {
	return intents.Intent{IntentID: id, IntentType: "FollowArtist", EntityID: user, ForkID: "production",
		Payload: map[string]any{"artistId": artist}}
}

const twice = `
intent_type: Twice
emits:
  - {event_type: FIRST, payload: {n: 1}}
  - {event_type: SECOND, payload: {n: 2}}
`

func TestSubmitRecordsEventsAndReplays(t *testing.T) {
	f := setup(t)
	out, err := f.ledger.Submit(f.ctx, follow("i-1", "user-1", "artist-9"))
	require.NoError(t, err)
	require.Equal(t, ledger.StatusSuccess, out.Status)
	require.False(t, out.Replayed)
	require.Equal(t, 1, out.HandlerVersion)
	require.Len(t, out.Events, 1)
	ev := out.Events[0]
	require.Equal(t, "i-1:1", ev.EventID)
	require.Equal(t, "ARTIST_FOLLOWED", ev.EventType)
	require.Equal(t, int64(1), ev.Sequence)
	require.Equal(t, "i-1", ev.IntentID)
	require.WithinDuration(t, time.Now(), ev.OccurredAt, time.Minute)
	require.Equal(t, time.UTC, ev.OccurredAt.Location())

	var body struct {
		Status, IntentID string
		Events           []json.RawMessage
	}
	require.NoError(t, json.Unmarshal(out.Body, &body))
	require.Equal(t, "SUCCESS", body.Status)
	require.Equal(t, "i-1", body.IntentID)
	decoded, err := event.Decode(body.Events[0])
	require.NoError(t, err)
	require.Equal(t, ev.EventID, decoded.EventID)
	require.JSONEq(t, `{"artistId":"artist-9"}`, string(decoded.Payload))

	var stored string
	var published *time.Time
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT envelope::text, published_at FROM causet_events WHERE event_id = 'i-1:1'").Scan(&stored, &published))
	require.Nil(t, published)
	require.JSONEq(t, string(body.Events[0]), stored)

	again, err := f.ledger.Submit(f.ctx, follow("i-1", "user-1", "artist-9"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, string(out.Body), string(again.Body), "the recorded body, byte for byte")
	require.Equal(t, out.Events[0].EventID, again.Events[0].EventID)

	// The same intentId with another request is refused, not answered with
	// the first request's outcome.
	for _, other := range []intents.Intent{follow("i-1", "user-1", "someone-else"), follow("i-1", "user-2", "artist-9")} {
		_, err = f.ledger.Submit(f.ctx, other)
		var re *ledger.ReusedError
		require.ErrorAs(t, err, &re)
	}
	require.Equal(t, 1, f.count(t, "causet_intents"))
	require.Equal(t, 1, f.count(t, "causet_events"))
}

func TestSequencesPerEntity(t *testing.T) {
	f := setup(t, twice)
	twiceOn := func(id, entity string) []int64 {
		out, err := f.ledger.Submit(f.ctx, intents.Intent{IntentID: id, IntentType: "Twice", EntityID: entity, ForkID: "production", Payload: map[string]any{}})
		require.NoError(t, err)
		var seqs []int64
		for i, ev := range out.Events {
			require.Equal(t, id+":"+string(rune('1'+i)), ev.EventID)
			seqs = append(seqs, ev.Sequence)
		}
		return seqs
	}
	require.Equal(t, []int64{1, 2}, twiceOn("a", "e-1"))
	require.Equal(t, []int64{3, 4}, twiceOn("b", "e-1"))
	require.Equal(t, []int64{1, 2}, twiceOn("c", "e-2"))
	out, err := f.ledger.Submit(f.ctx, follow("d", "e-1", "x"))
	require.NoError(t, err)
	require.Equal(t, int64(5), out.Events[0].Sequence, "one sequence per entity, whatever the intent type")
	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "e", IntentType: "Twice", EntityID: "e-1", ForkID: "staging", Payload: map[string]any{}})
	require.NoError(t, err)
	var last int64
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT last_sequence FROM causet_entity_sequences WHERE fork_id = 'staging' AND entity_id = 'e-1'").Scan(&last))
	require.Equal(t, int64(2), last, "forks number their entities apart")
}

func TestSubmitRejected(t *testing.T) {
	f := setup(t)
	in := intents.Intent{IntentID: "u-1", IntentType: "UnfollowArtist", EntityID: "user-1", ForkID: "production", Payload: map[string]any{"artistId": "artist-9"}}
	out, err := f.ledger.Submit(f.ctx, in)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusRejected, out.Status)
	require.JSONEq(t, `{"status":"REJECTED","intentId":"u-1","rule":"following","reason":"not following artist-9"}`, string(out.Body))
	var status, rule, reason string
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT status, rule, reason FROM causet_intents WHERE intent_id = 'u-1'").Scan(&status, &rule, &reason))
	require.Equal(t, []string{"rejected", "following", "not following artist-9"}, []string{status, rule, reason})
	require.Zero(t, f.count(t, "causet_events"))
	require.Zero(t, f.count(t, "causet_entity_sequences"))

	again, err := f.ledger.Submit(f.ctx, in)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, string(out.Body), string(again.Body))
	require.Equal(t, "following", again.Rule)
}

func TestRequestAndHandlerFaultsWriteNothing(t *testing.T) {
	f := setup(t, `
intent_type: ReadsMissing
reads: {r: {table: no_such_table, key: {id: intent.entityId}}}
rules: [{name: exists, reject_if: reads.r != null, reason: "'exists'"}]
emits: [{event_type: E, payload: {}}]
`, `
intent_type: Huge
emits: [{event_type: E, payload: {n: "double(intent.payload.n) * 1e30"}}]
`)
	_, err := f.ledger.Submit(f.ctx, follow(strings.Repeat("i", 199), "user-1", "a"))
	var ie *intents.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Contains(t, err.Error(), "intentId is 199 bytes: the ID of its event 1 (<intentId>:1) would be 201 bytes, more than the 200 allowed")

	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "x", IntentType: "Nope", EntityID: "e", ForkID: "f", Payload: map[string]any{}})
	require.ErrorIs(t, err, intents.ErrUnknownIntentType)

	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "x", IntentType: "ReadsMissing", EntityID: "e", ForkID: "f", Payload: map[string]any{}})
	var ee *intents.EvalError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, `reads.r: table no_such_table: relation "no_such_table" does not exist`, ee.Error())

	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "x", IntentType: "Huge", EntityID: "e", ForkID: "f", Payload: map[string]any{"n": int64(1)}})
	require.ErrorAs(t, err, &ee)
	require.Contains(t, ee.Error(), "does not fit an event's 64-bit integers")

	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "", IntentType: "FollowArtist", EntityID: "e", ForkID: "f", Payload: map[string]any{}})
	require.ErrorAs(t, err, &ie)
	f.requireNothingWritten(t)
}

func TestStatus(t *testing.T) {
	f := setup(t)
	st, err := f.ledger.Status(f.ctx, "nope")
	require.NoError(t, err)
	require.Equal(t, ledger.IntentStatus{IntentID: "nope", Status: "unknown"}, st)

	out, err := f.ledger.Submit(f.ctx, follow("s-1", "user-1", "artist-1"))
	require.NoError(t, err)
	st, err = f.ledger.Status(f.ctx, "s-1")
	require.NoError(t, err)
	require.Equal(t, "succeeded", st.Status)
	require.Len(t, st.Events, 1)
	ev, err := event.Decode(st.Events[0])
	require.NoError(t, err)
	require.Equal(t, out.Events[0].EventID, ev.EventID)
	require.True(t, out.Events[0].OccurredAt.Equal(ev.OccurredAt))

	_, err = f.ledger.Submit(f.ctx, intents.Intent{IntentID: "s-2", IntentType: "UnfollowArtist", EntityID: "user-2", ForkID: "p", Payload: map[string]any{"artistId": "z"}})
	require.NoError(t, err)
	st, err = f.ledger.Status(f.ctx, "s-2")
	require.NoError(t, err)
	require.Equal(t, ledger.IntentStatus{IntentID: "s-2", Status: "rejected", Rule: "following", Reason: "not following z"}, st)
}

func TestUnavailableAfterBoundedTries(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2")
	require.NoError(t, err)
	defer pool.Close()
	l := ledger.New(pool, nil, ledger.WithRetry(3, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, time.Second))
	start := time.Now()
	_, err = l.Submit(ctx, follow("i", "u", "a"))
	var ue *ledger.UnavailableError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "begin", ue.Op)
	require.Equal(t, 3, ue.Tries)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "waits 50 ms, then 100 ms")
	require.Contains(t, err.Error(), "ledger unavailable: begin failed after 3 tries")

	_, err = l.Status(ctx, "i")
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "acquire", ue.Op)
	require.Equal(t, 3, ue.Tries)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Submit(cancelled, follow("i", "u", "a"))
	require.ErrorAs(t, err, &ue)
	require.Equal(t, 1, ue.Tries, "a request that has gone is not retried")
}

// A careless client's 35 KB request whose numbers the handler copies into
// the event (5,000 × 1e-300) would be stored, and published, as a 1.5 MB
// envelope: the intent is refused before anything is written, with the
// reason.
func TestEventCheckedAsStored(t *testing.T) {
	f := setup(t, `
intent_type: Copy
emits: [{event_type: COPIED, payload: {xs: "intent.payload.xs"}}]
`)
	xs := make([]any, 5000)
	for i := range xs {
		xs[i] = 1e-300
	}
	_, err := f.ledger.Submit(f.ctx, intents.Intent{IntentID: "tiny", IntentType: "Copy", EntityID: "e", ForkID: "f",
		Payload: map[string]any{"xs": xs}})
	var ee *intents.EvalError
	require.ErrorAs(t, err, &ee)
	require.Contains(t, ee.Error(), "more than the")
	f.requireNothingWritten(t)

	// A few such numbers fit, and are stored as they were checked.
	out, err := f.ledger.Submit(f.ctx, intents.Intent{IntentID: "few", IntentType: "Copy", EntityID: "e", ForkID: "f",
		Payload: map[string]any{"xs": []any{1e-7, 1.5e-10}}})
	require.NoError(t, err)
	var stored string
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT envelope->>'payload' FROM causet_events WHERE intent_id = 'few'`).Scan(&stored))
	require.JSONEq(t, string(out.Events[0].Payload), stored)
	require.Equal(t, `{"xs":[0.0000001,0.00000000015]}`, string(out.Events[0].Payload))
}

// PlainNumbers writes numbers digit for digit as jsonb renders them.
func TestPlainNumbersAsPostgreSQLRendersThem(t *testing.T) {
	f := setup(t)
	for _, tok := range []string{"1e-3", "1.50e1", "-2.5E+2", "0e-2", "-0.0e1", "12e-1", "0.001e2", "1e21", "1.234e-7",
		"-9.999e-12", "123456789012345678e-5", "5E0", "7.0e-0", "100e-2"} {
		var rendered string
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT ($1::jsonb)::text`, `{"a":`+tok+`}`).Scan(&rendered))
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, []byte(rendered)))
		got, err := event.PlainNumbers([]byte(`{"a":` + tok + `}`))
		require.NoError(t, err)
		require.Equal(t, compact.String(), string(got), tok)
	}
}

// commitCutter is a TCP proxy to PostgreSQL that, once armed, drops both
// connections when the server's CommandComplete for COMMIT comes through:
// the transaction is committed, and its answer is lost.
type commitCutter struct {
	ln    net.Listener
	armed atomic.Bool
	cut   atomic.Int32
}

func newCommitCutter(t *testing.T, upstream string) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &commitCutter{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			go func() {
				defer client.Close()
				defer server.Close()
				commitDone := []byte("C\x00\x00\x00\x0bCOMMIT\x00")
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 {
						if c.armed.Load() && bytes.Contains(buf[:n], commitDone) {
							c.cut.Add(1)
							return
						}
						if _, werr := client.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return c
}

// The answer to COMMIT is lost after PostgreSQL committed: the outcome is
// reported unknown, never "nothing was written", and the status then says
// the intent succeeded; re-submitting gets the recorded answer.
func TestCommitAnswerLostIsOutcomeUnknown(t *testing.T) {
	f := setup(t)
	cfg := f.pool.Config().Copy()
	cutter := newCommitCutter(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(cutter.ln.Addr().String())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	proxied, err := pgxpool.NewWithConfig(f.ctx, cfg)
	require.NoError(t, err)
	defer proxied.Close()
	cat, err := intents.NewCatalog(f.ctx, proxied, nil)
	require.NoError(t, err)
	l := ledger.New(proxied, cat)

	cutter.armed.Store(true)
	_, err = l.Submit(f.ctx, follow("lost-1", "user-1", "artist-9"))
	var ou *ledger.OutcomeUnknownError
	require.ErrorAs(t, err, &ou, "%v", err)
	require.Equal(t, "lost-1", ou.IntentID)
	var ue *ledger.UnavailableError
	require.False(t, errors.As(err, &ue), "not 'nothing was written'")
	require.EqualValues(t, 1, cutter.cut.Load())

	st, err := f.ledger.Status(f.ctx, "lost-1")
	require.NoError(t, err)
	require.Equal(t, ledger.RecordedSucceeded, st.Status, "it was committed")
	again, err := f.ledger.Submit(f.ctx, follow("lost-1", "user-1", "artist-9"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, 1, f.count(t, "causet_events"))
}
