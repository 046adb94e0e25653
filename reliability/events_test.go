package reliability

import (
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// evt is one produced event and where it landed.
type evt struct {
	id        string
	entity    string
	seq       int64 // the envelope's sequence; grows with production order
	fails     bool  // payload.d = 0: fails every attempt
	partition int32
	offset    int64
	// occurredAt, when set, is the envelope's occurredAt (which routes its
	// dedupe row to that hour's partition); else a fixed time.
	occurredAt time.Time
}

// entities is how many entities the generated stream spreads over. All of
// an entity's events go to one partition, keyed by the entity, as a
// producer keyed by entity would send them.
const entities = 997

// mix describes a generated stream. Event i has sequence i and is a failing
// "head" when i%every == every/2; the follow events after a head are of its
// entity, so that with entity ordering they are parked behind it; in every
// failsBehind-th group the second follower fails too (a failure among the
// parked events, which becomes the key's next head on release). The other events are of entity i%entities: a head's
// entity also sees events long after it, once its key may be unblocked.
type mix struct {
	every, follow, failsBehind int
}

// twoPercent is the stream of most scenarios: 2 % heads, each followed by
// three events of its entity, and one failing follower per ten heads.
var twoPercent = mix{every: 50, follow: 3, failsBehind: 10}

func (m mix) head(i int) bool { return m.every > 0 && i%m.every == m.every/2 }

// group returns the head whose followers i belongs to (i itself if it is
// one), or -1.
func (m mix) group(i int) int {
	for j := i; j >= 0 && j >= i-m.follow; j-- {
		if m.head(j) {
			return j
		}
	}
	return -1
}

func (m mix) fails(i int) bool {
	if m.head(i) {
		return true
	}
	g := m.group(i)
	return g >= 0 && m.failsBehind > 0 && m.follow >= 2 && i == g+2 && (g/m.every)%m.failsBehind == 0
}

func (m mix) entity(i int) int {
	if g := m.group(i); g >= 0 {
		return g % entities
	}
	return i % entities
}

// succeeding counts the events of [0, n) that do not fail.
func (m mix) succeeding(n int) int {
	c := 0
	for i := 0; i < n; i++ {
		if !m.fails(i) {
			c++
		}
	}
	return c
}

// relEvt is event i of the stream m.
func (s *stack) relEvt(i int, m mix) evt {
	ent := m.entity(i)
	return evt{id: fmt.Sprintf("%s-%d", s.prefix, i), entity: fmt.Sprintf("ent-%d", ent), seq: int64(i),
		fails: m.fails(i), partition: int32(ent) % s.partitions}
}

// record is e's record: on e.partition, keyed by its entity.
func (s *stack) record(e evt) *kgo.Record {
	d := 1
	if e.fails {
		d = 0
	}
	at := "2026-12-02T12:00:00Z"
	if !e.occurredAt.IsZero() {
		at = e.occurredAt.UTC().Format(time.RFC3339Nano)
	}
	v := fmt.Sprintf(`{"eventId":%q,"eventType":"REL_EVENT","entityId":%q,"forkId":"production","sequence":%d,"occurredAt":%q,"payload":{"one":1,"d":%d}}`,
		e.id, e.entity, e.seq, at, d)
	return &kgo.Record{Partition: e.partition, Key: []byte(e.entity), Value: []byte(v)}
}

// produce produces evs, in order, and records where each landed in into.
func (s *stack) produce(evs []evt, into *eventLog) {
	s.t.Helper()
	recs := make([]*kgo.Record, len(evs))
	index := make(map[*kgo.Record]int, len(evs))
	for k, e := range evs {
		recs[k] = s.record(e)
		index[recs[k]] = k
	}
	res := s.producer.ProduceSync(s.ctx, recs...)
	for try := 1; try < 5 && nothingProduced(res) && s.ctx.Err() == nil; try++ {
		// The whole batch failed (once, at a soak's start, the producer ID
		// could not be had): nothing was acknowledged, so it is sent again,
		// in order (a record written unacknowledged repeats; the pipeline
		// applies an event ID once).
		time.Sleep(time.Second)
		res = s.producer.ProduceSync(s.ctx, recs...)
	}
	require.NoError(s.t, res.FirstErr())
	// ProduceSync's results come in completion order, not input order.
	for _, r := range res {
		e := evs[index[r.Record]]
		e.partition, e.offset = r.Record.Partition, r.Record.Offset
		into.add(e)
	}
}

// nothingProduced reports whether every record of a ProduceSync failed.
func nothingProduced(res kgo.ProduceResults) bool {
	for _, r := range res {
		if r.Err == nil {
			return false
		}
	}
	return len(res) > 0
}

// produceRange produces events [from, to) of the stream m.
func (s *stack) produceRange(from, to int, m mix, into *eventLog) {
	s.t.Helper()
	evs := make([]evt, 0, to-from)
	for i := from; i < to; i++ {
		evs = append(evs, s.relEvt(i, m))
	}
	s.produce(evs, into)
}

// producePaced produces n events of m in batches over about d, in a
// goroutine; the returned channel closes when all are produced.
func (s *stack) producePaced(n int, d time.Duration, m mix, into *eventLog) <-chan struct{} {
	return s.producePacedUntil(n, d, m, into, nil, n)
}

// producePacedUntil is producePaced that, past n events, goes on at the
// same pace until until closes, and stops at most events whatever happens
// (the bound keeps a scenario that fails before closing until finite).
func (s *stack) producePacedUntil(n int, d time.Duration, m mix, into *eventLog, until <-chan struct{}, most int) <-chan struct{} {
	done := make(chan struct{})
	const batch = 250
	batches := (n + batch - 1) / batch
	gap := d / time.Duration(max(batches, 1))
	go func() {
		defer close(done)
		for from := 0; from < most; from += batch {
			if from >= n {
				select {
				case <-until:
					return
				default:
				}
				if until == nil {
					return
				}
			}
			s.produceRange(from, min(from+batch, most), m, into)
			time.Sleep(gap)
		}
	}()
	return done
}

// eventLog is the list of produced events.
type eventLog struct {
	mu sync.Mutex
	ev []evt
}

func (l *eventLog) add(e evt) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *eventLog) all() []evt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]evt(nil), l.ev...)
}

func (l *eventLog) len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.ev) }
