package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/relay"
)

func TestMain(m *testing.M) {
	if childMode() {
		runChild()
		return
	}
	testenv.Main(m)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ledger is a fresh database with the ledger schema, written to as the
// ledger writes, remembering every event it wrote.
type ledger struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	written []event.Envelope
	intents int
}

func newLedger(t testing.TB) *ledger {
	pool := testenv.Postgres(t)
	return &ledger{pool: pool}
}

// write records one succeeded intent of n events in one transaction, as
// the ledger does: the entity's next sequence numbers from its sequence row
// (whose lock orders concurrent writers of the entity), the intent row, then
// the events with deterministic IDs <intentId>:<n>.
func (l *ledger) write(ctx context.Context, fork, entity string, n int) error {
	return l.writeSized(ctx, fork, entity, n, 0)
}

// writeSized is write with each event's payload padded by pad bytes.
func (l *ledger) writeSized(ctx context.Context, fork, entity string, n, pad int) error {
	l.mu.Lock()
	l.intents++
	intentID := fmt.Sprintf("intent-%d", l.intents)
	l.mu.Unlock()

	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var (
		last int64
		now  time.Time
	)
	if err := tx.QueryRow(ctx, `
		INSERT INTO causet_entity_sequences (fork_id, entity_id, last_sequence) VALUES ($1, $2, $3)
		ON CONFLICT (fork_id, entity_id) DO UPDATE SET last_sequence = causet_entity_sequences.last_sequence + $3
		RETURNING last_sequence, now()`, fork, entity, n).Scan(&last, &now); err != nil {
		return err
	}
	envs := make([]event.Envelope, n)
	for i := range envs {
		seq := last - int64(n) + int64(i) + 1
		envs[i] = event.Envelope{
			EventID: fmt.Sprintf("%s:%d", intentID, i+1), EventType: "ITEM_ADDED", EntityID: entity, ForkID: fork,
			IntentID: intentID, Sequence: seq, OccurredAt: now.UTC(),
			Payload: json.RawMessage(fmt.Sprintf(`{"item": "i-%d", "qty": %d, "pad": %q}`, seq, i+1, padding(pad))),
		}
	}
	response, err := json.Marshal(map[string]any{"status": "SUCCESS", "intentId": intentID, "events": envs})
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response)
		VALUES ($1, 'AddItem', $2, $3, 'succeeded', 1, $4)`, intentID, entity, fork, response); err != nil {
		return err
	}
	for _, e := range envs {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.EventID, fork, entity, e.Sequence, e.EventType, intentID, b); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	l.written = append(l.written, envs...)
	l.mu.Unlock()
	return nil
}

// writeMany writes intents of 1 to 3 events round-robin over entities
// e-0..e-(entities-1) of forks main and f2, and returns how many events.
func (l *ledger) writeMany(t testing.TB, intents, entities int) int {
	t.Helper()
	events := 0
	for i := range intents {
		n := 1 + i%3
		require.NoError(t, l.write(ctxFor(t, 10*time.Second), []string{"main", "f2"}[i%2], fmt.Sprintf("e-%d", i%entities), n))
		events += n
	}
	return events
}

func (l *ledger) events() []event.Envelope {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event.Envelope(nil), l.written...)
}

func (l *ledger) unpublished(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, l.pool.QueryRow(ctxFor(t, 10*time.Second),
		`SELECT count(*) FROM causet_events WHERE published_at IS NULL`).Scan(&n))
	return n
}

// publishedIDs are the events marked published.
func (l *ledger) publishedIDs(t testing.TB) []string {
	t.Helper()
	rows, err := l.pool.Query(ctxFor(t, 10*time.Second), `SELECT event_id FROM causet_events WHERE published_at IS NOT NULL`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func (l *ledger) waitAllPublished(t testing.TB, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return l.unpublished(t) == 0 }, within, 20*time.Millisecond,
		"every ledger event marked published")
}

// running is a relay whose Run goroutine the test stops.
type running struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// fastOptions are relay options with short waits, on a fresh registry.
func fastOptions(t testing.TB, l *ledger, brokers []string, topic string) relay.Options {
	return relay.Options{
		Pool: l.pool, Brokers: brokers, Topic: topic, Batch: 7,
		PollInterval: 10 * time.Millisecond, LockRetry: 50 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ShutdownGrace: 2 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Registerer: prometheus.NewRegistry(),
	}
}

// start builds a relay from opts and runs it until stop (or the test's end).
func start(t testing.TB, opts relay.Options) *running {
	t.Helper()
	return startWith(t, context.Background(), opts)
}

// startWith is start with Run's context derived from parent.
func startWith(t testing.TB, parent context.Context, opts relay.Options) *running {
	t.Helper()
	r, err := relay.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(parent)
	rr := &running{reg: opts.Registerer.(*prometheus.Registry), cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { rr.stop(t) })
	return rr
}

// stop cancels Run and requires it to return, nil, within 10s.
func (rr *running) stop(t testing.TB) {
	t.Helper()
	if rr.done == nil {
		return
	}
	rr.cancel()
	select {
	case err := <-rr.done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	rr.done = nil
}

// metric is the value of the unlabelled gauge or counter name in reg, and
// whether reg reported it.
func metric(t testing.TB, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

func (rr *running) metric(t testing.TB, name string) float64 {
	t.Helper()
	v, _ := metric(t, rr.reg, name)
	return v
}

// eventsTopic is a Kafka broker with an events topic of the test's own,
// of three partitions.
func eventsTopic(t testing.TB) (brokers []string, topic string) {
	t.Helper()
	brokers = testenv.Kafka(t)
	topic = testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)
	return brokers, topic
}

// topicRecords reads topic up to its end offsets, in partition then
// offset order; no fetch may fail.
func topicRecords(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	recs, errs := testenv.ReadTopic(t, ctxFor(t, 30*time.Second), brokers, topic)
	require.Empty(t, errs, "fetch errors reading %s", topic)
	return recs
}

// checkTopic requires that recs (partition then offset order) hold every
// written event, keyed by entityId, with a value event.Decode accepts and
// equal to what was written; that each (fork, entity)'s events first appear
// in sequence order 1, 2, 3...; and that a repeated eventId repeats the same
// bytes. It returns the number of repeats.
func checkTopic(t testing.TB, recs []*kgo.Record, written []event.Envelope) (resends int) {
	t.Helper()
	want := map[string]event.Envelope{}
	for _, e := range written {
		want[e.EventID] = e
	}
	seen := map[string][]byte{}
	next := map[[2]string]int64{}
	for _, rec := range recs {
		env, err := event.Decode(rec.Value)
		require.NoError(t, err, "value %s", rec.Value)
		require.Equal(t, env.EntityID, string(rec.Key), "key is the entityId")
		if first, ok := seen[env.EventID]; ok {
			require.Equal(t, string(first), string(rec.Value), "a repeat of %s is a re-send of the same event", env.EventID)
			resends++
			continue
		}
		seen[env.EventID] = rec.Value
		w, ok := want[env.EventID]
		require.True(t, ok, "the topic holds %s, which the ledger never wrote", env.EventID)
		require.JSONEq(t, string(w.Payload), string(env.Payload))
		require.True(t, w.OccurredAt.Equal(env.OccurredAt), "occurredAt %s, want %s", env.OccurredAt, w.OccurredAt)
		w.Payload, env.Payload, w.OccurredAt, env.OccurredAt = nil, nil, time.Time{}, time.Time{}
		require.Equal(t, w, env)
		key := [2]string{env.ForkID, env.EntityID}
		require.Equal(t, next[key]+1, env.Sequence, "%s/%s: first appearances in sequence order (partition %d, offset %d)",
			env.ForkID, env.EntityID, rec.Partition, rec.Offset)
		next[key] = env.Sequence
	}
	require.Len(t, seen, len(want), "every event the ledger wrote is on the topic")
	return resends
}

// padding is n characters that do not compress (the producer compresses
// its batches).
func padding(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(rand.Text())
	}
	return b.String()[:n]
}
