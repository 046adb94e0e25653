package reliability

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/projection"
)

// Scenario 15: a poison row in the outbox. The events topic takes records
// of at most 16 KiB (max.message.bytes), and among 5,000 intents (full:
// 20,000) one records an event of about 20 KiB: valid by every limit of the
// write path, refused by this topic. The relay sets it aside with Kafka's
// reason and publishes everything else once, the events after it and of
// its entity included; `causet outbox list` shows it; nothing waits behind
// it.
func TestReliability15WritePathPoisonRow(t *testing.T) {
	p := gate(t)
	r := newResult(t, "writepath_poison_row/entity")
	n := pick(p, 5000, 20000)
	limit := "16384"
	w := newWritePath(t, stackOptions{partitions: 6, topicConfig: map[string]*string{"max.message.bytes": &limit}})
	doc, err := intents.Parse([]byte(`
intent_type: Note
emits: [{event_type: NOTE_ADDED, payload: {text: intent.payload.text}}]
`))
	require.NoError(t, err)
	_, err = intents.Deploy(w.ctx, w.pool, doc)
	require.NoError(t, err)
	wk := w.worker(nil)
	b := w.bridge(nil)
	w.startRuntime()
	rl := w.relay()
	cl := w.client(wpCallers)

	ins := w.gen.slice(0, n)
	poison := client.Intent{IntentID: w.prefix + "-poison", IntentType: "Note", EntityID: ins[n/2].EntityID, ForkID: ins[n/2].ForkID,
		Payload: map[string]any{"text": incompressible(20_000)}}
	ins = append(ins[:n/2], append([]client.Intent{poison}, ins[n/2:]...)...)
	start := time.Now()
	outs := submitPaced(w.ctx, cl, ins, wpCallers, 0)
	r.fig("submit_s", durS(time.Since(start)))
	r.intents(w.checkIntents(ins, outs))
	po := outs[n/2]
	require.NoError(t, po.err)
	require.Equal(t, client.ResultSuccess, po.res.Status, "the poison intent is valid by every limit of the write path: %+v", po.res)

	evs, _ := w.settle(r, 5*time.Minute)
	r.fig("events_published", len(evs))
	aside := w.setAside()
	r.fig("events_set_aside", len(aside))
	require.Len(t, aside, 1, "the poison event, and only it, is set aside")
	var reason string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason FROM causet_events_set_aside WHERE event_id = $1`, poison.IntentID+":1").Scan(&reason))
	require.Contains(t, reason, "MESSAGE_TOO_LARGE")
	require.Equal(t, 1.0, rl.metric("causet_relay_set_aside_events"), "the relay shows it")
	require.Len(t, rl.logEvents("relay_event_set_aside"), 1)
	stdout, err := w.causetOutput("outbox", "list")
	require.NoError(t, err)
	require.Contains(t, stdout, poison.IntentID+":1")
	r.fig("relay_batch_failures", rl.metric("causet_relay_batch_failures_total"))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, wk.exited(), "worker exited:\n%s", wk.logTail(30))
	require.False(t, rl.exited(), "relay exited:\n%s", rl.logTail(30))
}

// Scenario 16: a long reader of the dedupe ledger (as a pg_dump is) while
// events flow into two hour partitions, this hour's and the next's, and a
// bridge starts: its dedupe maintenance wants to create an hour and drop an
// expired one. Applies keep flowing the whole time the reader holds its
// locks (before, the maintenance's DDL queued every insert behind the
// reader); the drop waits for a run after the reader; nothing is lost or
// applied twice.
func TestReliability16LongReader(t *testing.T) {
	p := gate(t)
	r := newResult(t, "long_reader/entity")
	n := pick(p, 4000, 12000)
	hold := pick(p, 20*time.Second, 40*time.Second)
	s := newStack(t, stackOptions{partitions: 6})
	w := s.worker(nil)
	b1 := s.bridge(nil)
	// The first maintenance has made the hours up to DedupeAhead.
	now := time.Now().UTC()
	ahead := projection.DedupeHour(now.Add(projection.DedupeAhead))
	require.Eventually(t, func() bool {
		hours, err := projection.DedupeHourPartitions(s.ctx, s.pool)
		return err == nil && len(hours) > 0 && hours[len(hours)-1] >= ahead
	}, time.Minute, 100*time.Millisecond, "the first maintenance")

	// Maintenance will find an hour to create and an expired one to drop.
	// The change takes turns with the maintainers still running (the
	// worker's and the bridge's first runs), as a hand change must; a
	// deadlock with their size reading (which locks the partitions, then
	// the parent, where DROP TABLE locks the parent first) is retried, as
	// PostgreSQL advises.
	old := projection.DedupeHour(now.Add(-40 * 24 * time.Hour))
	var err error
	for range 5 {
		err = projection.UnderDedupeMaintenance(s.ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(s.ctx, "DROP TABLE "+projection.DedupePartition(ahead)); err != nil {
				return err
			}
			_, err := tx.Exec(s.ctx, fmt.Sprintf("CREATE TABLE %s PARTITION OF causet_projection_applied FOR VALUES IN (%d)",
				projection.DedupePartition(old), old))
			return err
		})
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "40P01" { // deadlock_detected
			break
		}
	}
	require.NoError(t, err)

	// Events of this hour and of the next, produced over the hold.
	evs := make([]evt, n)
	next := now.Truncate(time.Hour).Add(time.Hour + time.Minute)
	for i := range evs {
		evs[i] = s.relEvt(i, mix{})
		evs[i].occurredAt = now
		if i%2 == 1 {
			evs[i].occurredAt = next
		}
	}
	var events eventLog
	s.produce(evs[:n/4], &events)

	reader, err := s.pool.Begin(s.ctx)
	require.NoError(t, err)
	var rows int
	require.NoError(t, reader.QueryRow(s.ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&rows))
	heldAt := time.Now()
	b2 := s.bridge(nil) // its maintenance runs at start, behind the reader
	producedRest := make(chan struct{})
	go func() {
		defer close(producedRest)
		for from := n / 4; from < n; from += n / 8 {
			s.produce(evs[from:min(from+n/8, n)], &events)
			time.Sleep(hold / 8)
		}
	}()
	var samples []int
	for time.Since(heldAt) < hold {
		samples = append(samples, s.tryCount(`SELECT count(*) FROM rel_effects`))
		time.Sleep(time.Second)
	}
	<-producedRest
	stalls := 0 // seconds in a row without an apply while events waited
	longest := 0
	for i := 1; i < len(samples); i++ {
		if samples[i] == samples[i-1] && samples[i] < n {
			stalls++
			longest = max(longest, stalls)
		} else {
			stalls = 0
		}
	}
	r.fig("reader_held_s", durS(time.Since(heldAt)))
	r.fig("applied_during_hold", samples[len(samples)-1]-samples[0])
	r.fig("longest_stall_s", longest)
	require.NoError(t, reader.Rollback(s.ctx))
	require.Contains(t, b2.logTail(200), "projection_dedupe_maintenance_failed", "the drop waits for a run after the reader")
	require.LessOrEqual(t, longest, 5, "applies stalled behind the maintenance's DDL: %v", samples)
	require.Positive(t, samples[len(samples)-1]-samples[0], "nothing applied while the reader held its locks")
	var created bool
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))`,
		projection.DedupePartition(ahead)).Scan(&created))
	require.True(t, created, "the missing hour was created and attached behind the reader")

	require.True(t, s.waitCommittedToEnd(2*time.Minute), "offsets not committed to the end: %s", s.progress())
	s.waitApplied(evs, time.Minute)
	require.False(t, b1.exited(), "bridge exited:\n%s", b1.logTail(30))
	require.False(t, b2.exited(), "bridge exited:\n%s", b2.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), false, true)
	r.verdict(v, false, true)
}

// incompressible is n characters of random text: a record the producer's
// compression cannot shrink under the topic's limit.
func incompressible(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(rand.Text())
	}
	return b.String()[:n]
}
