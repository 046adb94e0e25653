package bench

// The ordering phase: entity ordering (the default) against
// CAUSET_ORDERING=none in the same run, with failures on keys that also
// carry successful events and a real worker on the default schedule — the
// case where ordering costs something. Waiting behind a head for its
// schedule is what ordering means, so the phase measures the mechanism, not
// the wait: the events of keys that never fail against none, every
// successful event applied less the schedule's length, and how fast a
// blocked key's parked events go once its head has settled.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/backoff"
)

// OrderingRun is the ordering phase.
type OrderingRun struct {
	// Events over Keys keys; Failing of them fail on every attempt, each on
	// a key of its own among keys that carry successful events too
	// (FailingKeys); Clean events are those of keys that never fail.
	Events      int `json:"events"`
	Keys        int `json:"keys"`
	Failing     int `json:"failing"`
	FailingKeys int `json:"failingKeys"`
	Clean       int `json:"clean"`
	// ScheduleS is the default schedule's length (its last attempt's offset).
	ScheduleS float64 `json:"scheduleS"`

	// Rounds are the none/entity pairs, run in turn; the figures below are
	// their medians (a pair lasts about a second under none, so one pair
	// alone is mostly noise on a shared machine).
	Rounds []OrderingRound `json:"rounds"`

	// None: CAUSET_ORDERING=none. DrainS is from the first event applied to
	// the last successful one; CleanEPS the clean events over the time to
	// the last of them.
	NoneDrainS  float64 `json:"noneDrainS"`
	NoneCleanS  float64 `json:"noneCleanS"`
	NoneCleanEP float64 `json:"noneCleanEventsPerSec"`
	// Entity: the default. AllS is the time to the last successful event
	// applied (the events behind each failing head wait for its schedule).
	EntityCleanS  float64 `json:"entityCleanS"`
	EntityCleanEP float64 `json:"entityCleanEventsPerSec"`
	EntityAllS    float64 `json:"entityAllS"`

	// HotParked events wait behind one failing head; HotDrainS is from its
	// dead letter to the last of them applied.
	HotParked int     `json:"hotParked"`
	HotDrainS float64 `json:"hotDrainS"`
	// WideKeys heads, each with WideParked/WideKeys events parked behind it,
	// settle together; WideDrainS is from then to the last parked event
	// applied, WideEPS the released events over it.
	WideKeys   int     `json:"wideKeys"`
	WideParked int     `json:"wideParked"`
	WideDrainS float64 `json:"wideDrainS"`
	WideEPS    float64 `json:"wideEventsPerSec"`
}

// OrderingRound is one none/entity pair of the ordering phase, with the
// same fields as OrderingRun's medians.
type OrderingRound struct {
	NoneDrainS    float64 `json:"noneDrainS"`
	NoneCleanS    float64 `json:"noneCleanS"`
	NoneCleanEP   float64 `json:"noneCleanEventsPerSec"`
	EntityCleanS  float64 `json:"entityCleanS"`
	EntityCleanEP float64 `json:"entityCleanEventsPerSec"`
	EntityAllS    float64 `json:"entityAllS"`
}

// orderingRounds is how many none/entity pairs the phase runs.
func (b *bench) orderingRounds() int {
	if b.opts.Quick {
		return 1
	}
	return 3
}

// medians sets run's figures to the medians of its rounds.
func (run *OrderingRun) medians() {
	pick := func(f func(OrderingRound) float64) float64 {
		xs := make([]float64, len(run.Rounds))
		for i, r := range run.Rounds {
			xs[i] = f(r)
		}
		return median(xs)
	}
	run.NoneDrainS = pick(func(r OrderingRound) float64 { return r.NoneDrainS })
	run.NoneCleanS = pick(func(r OrderingRound) float64 { return r.NoneCleanS })
	run.NoneCleanEP = pick(func(r OrderingRound) float64 { return r.NoneCleanEP })
	run.EntityCleanS = pick(func(r OrderingRound) float64 { return r.EntityCleanS })
	run.EntityCleanEP = pick(func(r OrderingRound) float64 { return r.EntityCleanEP })
	run.EntityAllS = pick(func(r OrderingRound) float64 { return r.EntityAllS })
}

// orderingKey is the entity of key k: keys with a failing event are named
// f…, the others c…, so each group is found by its prefix.
func orderingKey(prefix string, k int, fails bool) string {
	if fails {
		return fmt.Sprintf("%s-f%05d", prefix, k)
	}
	return fmt.Sprintf("%s-c%05d", prefix, k)
}

// orderingRecords are n events over keys keys, in rounds (event i is key
// i%keys of round i/keys). One key in five fails once, at a round of its
// own, so failures are 1 % at n = 20 × keys and every failing key carries
// successful events before and after its failure.
func orderingRecords(topic, prefix string, n, keys int, at time.Time) (recs []*kgo.Record, failing, failingKeys, clean int) {
	rounds := max(n/keys, 1)
	for i := range n {
		k, round := i%keys, i/keys
		hasFailure := k%5 == 0
		fails := hasFailure && round == (k/5)%rounds
		entity := orderingKey(prefix, k, hasFailure)
		id := fmt.Sprintf("%s-%07d", prefix, i)
		v, _ := json.Marshal(envelope(id, entity, i, fails, at))
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(entity), Value: v})
		switch {
		case fails:
			failing++
		case !hasFailure:
			clean++
		}
	}
	return recs, failing, (keys + 4) / 5, clean
}

// orderingSizes: events, keys, the hot key's parked events, the wide
// sub-phase's keys and parked events.
func (b *bench) orderingSizes() (n, keys, hot, wideKeys, wideParked int) {
	if b.opts.Quick {
		return 10_000, 500, 2_000, 200, 4_000
	}
	return 20_000, 1_000, 2_000, 500, 10_000
}

func (b *bench) orderingPhase(ctx context.Context) error {
	n, keys, hot, wideKeys, wideParked := b.orderingSizes()
	schedule := config.DefaultRetry()
	plan := schedule.Plan(config.ModeInline)
	run := OrderingRun{Events: n, Keys: keys, ScheduleS: plan.Offsets[len(plan.Offsets)-1].Seconds(),
		HotParked: hot, WideKeys: wideKeys, WideParked: wideParked}
	for round := range b.orderingRounds() {
		var pair OrderingRound
		for _, ordering := range []string{string(config.OrderingNone), string(config.OrderingEntity)} {
			all, cleanS, err := b.orderingPass(ctx, &run, round, ordering, schedule)
			if err != nil {
				return err
			}
			if ordering == string(config.OrderingNone) {
				pair.NoneDrainS, pair.NoneCleanS = all, cleanS
				pair.NoneCleanEP = float64(run.Clean) / cleanS
			} else {
				pair.EntityAllS, pair.EntityCleanS = all, cleanS
				pair.EntityCleanEP = float64(run.Clean) / cleanS
			}
			b.progress("ordering %s (round %d): %d events over %d keys, %d failing on %d shared keys: clean events %.0f/s (%.2f s), every successful event in %.2f s",
				ordering, round+1, n, keys, run.Failing, run.FailingKeys, float64(run.Clean)/cleanS, cleanS, all)
		}
		run.Rounds = append(run.Rounds, pair)
	}
	run.medians()
	var err error
	if run.HotDrainS, err = b.releaseDrain(ctx, "hot", 1, hot); err != nil {
		return err
	}
	b.progress("ordering: %d events parked behind one head, applied %.2f s after it settled", hot, run.HotDrainS)
	if run.WideDrainS, err = b.releaseDrain(ctx, "wide", wideKeys, wideParked); err != nil {
		return err
	}
	run.WideEPS = float64(wideParked) / run.WideDrainS
	b.progress("ordering: %d events parked behind %d heads, released at %.0f events/s after the first settled", wideParked, wideKeys, run.WideEPS)
	b.res.OrderingPhase = run
	return nil
}

// orderingPass produces the phase's events to a topic of their own, runs a
// bridge with CAUSET_ORDERING=ordering until every successful event is
// applied, and returns the seconds from the first applied to the last
// successful one and to the last of keys that never fail.
func (b *bench) orderingPass(ctx context.Context, run *OrderingRun, round int, ordering string, schedule config.Retry) (all, cleanS float64, err error) {
	name := fmt.Sprintf("ordering-%s-%d", ordering, round+1)
	prefix := fmt.Sprintf("%s-ord%d-%s", b.runID, round+1, ordering)
	topic, err := b.topic(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	dead, err := b.deadLetters(ctx)
	if err != nil {
		return 0, 0, err
	}
	recs, failing, failingKeys, clean := orderingRecords(topic, prefix, run.Events, run.Keys, time.Now())
	run.Failing, run.FailingKeys, run.Clean = failing, failingKeys, clean
	if err := b.produce(ctx, recs); err != nil {
		return 0, 0, err
	}
	p, err := b.startBridge(ctx, name, phaseEnv(topic, b.workQueue, mergeEnv(retryEnv(schedule),
		map[string]string{"CAUSET_ORDERING": ordering})))
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	timeout := time.Duration(run.ScheduleS*float64(time.Second)) + 3*time.Minute
	if err := b.waitRows(ctx, prefix, run.Events-failing, timeout); err != nil {
		return 0, 0, fmt.Errorf("ordering %s: %w", ordering, err)
	}
	// The pass is timed to its last successful event, but its failing
	// events' hand-offs and schedules run on: the bridge stays until every
	// one is dead-lettered, so the next pass has Temporal and the worker to
	// itself.
	if err := b.waitDeadLetters(ctx, dead+int64(failing), timeout); err != nil {
		return 0, 0, fmt.Errorf("ordering %s: %w", ordering, err)
	}
	return b.orderingTimes(ctx, prefix)
}

// deadLetters is how many records the DLQ topic holds (the sum of its
// partitions' end offsets: only the bench's worker writes to it).
func (b *bench) deadLetters(ctx context.Context) (int64, error) {
	ends, err := kadm.NewClient(b.prod).ListEndOffsets(ctx, b.dlqTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("DLQ end offsets: %w", err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

func mergeEnv(a, c map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range c {
		out[k] = v
	}
	return out
}

// waitCount polls count every poll until it reaches want, failing after
// timeout with what it counts (e.g. "events applied").
func waitCount(ctx context.Context, what string, want int64, timeout, poll time.Duration, count func(context.Context) (int64, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := count(ctx)
		if err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s after %s", got, want, what, timeout)
		}
		if err := backoff.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// waitRows waits until prefix has want rows applied.
func (b *bench) waitRows(ctx context.Context, prefix string, want int, timeout time.Duration) error {
	return waitCount(ctx, "events applied", int64(want), timeout, 50*time.Millisecond, func(ctx context.Context) (int64, error) {
		n, err := b.rowsWithPrefix(ctx, prefix)
		return int64(n), err
	})
}

// waitDeadLetters waits until the DLQ topic holds want records.
func (b *bench) waitDeadLetters(ctx context.Context, want int64, timeout time.Duration) error {
	return waitCount(ctx, "dead letters", want, timeout, 100*time.Millisecond, b.deadLetters)
}

// orderingTimes are, from the first row of prefix applied, the seconds to
// its last row and to the last row of its clean keys.
func (b *bench) orderingTimes(ctx context.Context, prefix string) (all, clean float64, err error) {
	err = b.svc.Pool.QueryRow(ctx, `SELECT extract(epoch FROM max(applied_at) - min(applied_at))::float8,
  extract(epoch FROM max(applied_at) FILTER (WHERE entity_id LIKE $3) - min(applied_at))::float8
FROM bench_rows WHERE event_id >= $1 AND event_id < $2`, prefix+"-", prefix+".", prefix+"-c%").Scan(&all, &clean)
	return all, clean, err
}

// releaseDrain parks parked/heads events behind each of heads failing
// heads (their keys' first events, which fail on every attempt), waits
// until they are all parked, and returns the seconds from the heads
// settling to the last parked event applied. With one head it waits for
// the head's own dead letter on the default schedule (the worker records
// it; the key's row is read every 10 ms). With many, their retry workflows
// would dead-letter over a few seconds as Temporal runs them, so the phase
// settles them together the way the worker does, by the rows' state, and
// times the release alone (their workflows wait on a queue no worker polls).
func (b *bench) releaseDrain(ctx context.Context, name string, heads, parked int) (float64, error) {
	prefix := fmt.Sprintf("%s-rel-%s", b.runID, name)
	topic, err := b.topic(ctx, "release-"+name)
	if err != nil {
		return 0, err
	}
	per := parked / heads
	at := time.Now()
	var recs []*kgo.Record
	for h := range heads {
		entity := fmt.Sprintf("%s-k%05d", prefix, h)
		for j := 0; j <= per; j++ {
			id := fmt.Sprintf("%s-%05d-%05d", prefix, h, j)
			v, _ := json.Marshal(envelope(id, entity, j, j == 0, at))
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(entity), Value: v})
		}
	}
	if err := b.produce(ctx, recs); err != nil {
		return 0, err
	}
	// Many heads are settled by the phase itself, so their workflows go to
	// the queue no worker polls: the release is timed without 500 retry
	// attempts running beside it. One head dead-letters on its own schedule.
	queue := b.workQueue
	if heads > 1 {
		queue = b.idleQueue
	}
	p, err := b.startBridge(ctx, "release-"+name, phaseEnv(topic, queue, mergeEnv(retryEnv(config.DefaultRetry()),
		map[string]string{"CAUSET_ORDERING": string(config.OrderingEntity)})))
	if err != nil {
		return 0, err
	}
	defer p.stop()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// Every event parked and every head's workflow started: a head
		// settles only after its start, so the release is timed alone.
		var n, blocked, pending int
		if err := b.svc.Pool.QueryRow(ctx, `SELECT coalesce(sum(parked), 0)::int, count(*)::int, count(pending_start)::int
FROM causet_blocked_keys WHERE topic = $1`, topic).Scan(&n, &blocked, &pending); err != nil {
			return 0, err
		}
		if n == heads*per && blocked == heads && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("release %s: %d of %d events parked behind %d of %d heads after 2 minutes", name, n, heads*per, blocked, heads)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var settledAt time.Time
	if heads > 1 {
		if err := b.svc.Pool.QueryRow(ctx, `WITH s AS (UPDATE causet_blocked_keys SET head_state = 'settled' WHERE topic = $1 RETURNING 1)
SELECT now() FROM s LIMIT 1`, topic).Scan(&settledAt); err != nil {
			return 0, err
		}
	}
	for settledAt.IsZero() {
		var moved int
		var now time.Time
		if err := b.svc.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE head_state <> 'retrying')::int, now()
FROM causet_blocked_keys WHERE topic = $1`, topic).Scan(&moved, &now); err != nil {
			return 0, err
		}
		if moved > 0 {
			settledAt = now
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("release %s: no head settled within 2 minutes", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.waitRows(ctx, prefix, heads*per, 2*time.Minute); err != nil {
		return 0, fmt.Errorf("release %s: %w", name, err)
	}
	var last time.Time
	if err := b.svc.Pool.QueryRow(ctx, `SELECT max(applied_at) FROM bench_rows WHERE event_id >= $1 AND event_id < $2`,
		prefix+"-", prefix+".").Scan(&last); err != nil {
		return 0, err
	}
	return last.Sub(settledAt).Seconds(), nil
}
