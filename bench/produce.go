package bench

// Load generation: the bench events, their records, the phase topics, and
// producing them in bulk or paced.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/event"
)

// envelope builds one bench event; failing ones divide by zero.
func envelope(id, entity string, seq int, fail bool, at time.Time) event.Envelope {
	d := 1
	if fail {
		d = 0
	}
	return event.Envelope{
		EventID: id, EventType: benchEventType, EntityID: entity, ForkID: benchFork,
		IntentID: "bench", Sequence: int64(seq), OccurredAt: at,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"d":%d}`, seq+1, d)),
	}
}

// failing reports whether event i of a run at failPct fails: every
// 100/failPct-th event, spread evenly.
func failing(i int, failPct float64) bool {
	if failPct <= 0 {
		return false
	}
	every := int(100/failPct + 0.5)
	return i%every == every-1
}

// record returns event i of phase prefix for topic, stamped at, and whether
// it fails (failing); failing events have entities of their own.
func record(topic, prefix string, i int, failPct float64, at time.Time) (*kgo.Record, bool) {
	id := fmt.Sprintf("%s-%07d", prefix, i)
	entity := fmt.Sprintf("e-%s-%d", prefix, i%1000)
	f := failing(i, failPct)
	if f {
		entity = "fail-" + id
	}
	v, _ := json.Marshal(envelope(id, entity, i, f, at))
	return &kgo.Record{Topic: topic, Key: []byte(entity), Value: v}, f
}

// records returns n records of phase prefix for topic (record) and how many
// of them fail.
func records(topic, prefix string, n int, failPct float64, at time.Time) ([]*kgo.Record, int) {
	recs := make([]*kgo.Record, 0, n)
	nf := 0
	for i := range n {
		rec, f := record(topic, prefix, i, failPct, at)
		if f {
			nf++
		}
		recs = append(recs, rec)
	}
	return recs, nf
}

func (b *bench) topic(ctx context.Context, phase string) (string, error) {
	t := "bench-" + b.runID + "-" + phase
	return t, devstack.EnsureTopicsWith(ctx, b.kafka(), int32(b.sizes.Partitions), t)
}

func (b *bench) produce(ctx context.Context, recs []*kgo.Record) error {
	for i := 0; i < len(recs); i += 5000 {
		if err := b.prod.ProduceSync(ctx, recs[i:min(i+5000, len(recs))]...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// phaseEvents creates the topic of phase and produces n events of prefix
// into it (records, stamped now); it returns the topic and how many of the
// events fail.
func (b *bench) phaseEvents(ctx context.Context, phase, prefix string, n int, failPct float64) (string, int, error) {
	topic, err := b.topic(ctx, phase)
	if err != nil {
		return "", 0, err
	}
	recs, nf := records(topic, prefix, n, failPct, time.Now())
	if err := b.produce(ctx, recs); err != nil {
		return "", 0, err
	}
	return topic, nf, nil
}

// paced produces events at rate per second for d, each stamped with the
// time it is handed to the producer, and returns how many it sent and how
// many of them fail.
func (b *bench) paced(ctx context.Context, topic, prefix string, rate float64, d time.Duration, failPct float64) (int, int, error) {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent, nf := 0, 0
	var perr atomic.Value
	var wg sync.WaitGroup
	for now := start; now.Sub(start) < d; now = <-t.C {
		want := int(rate * now.Sub(start).Seconds())
		for ; sent < want; sent++ {
			rec, f := record(topic, prefix, sent, failPct, time.Now())
			if f {
				nf++
			}
			wg.Add(1)
			b.prod.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
				wg.Done()
			})
		}
	}
	wg.Wait()
	if err, _ := perr.Load().(error); err != nil {
		return sent, nf, fmt.Errorf("paced produce: %w", err)
	}
	return sent, nf, nil
}
