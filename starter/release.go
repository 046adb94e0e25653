package starter

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// Releasing parked events (ordered.go): between batches, the partition
// worker takes the keys whose head has moved on and, in runs of up to
// releaseLimit events across keys, applies their parked events in order
// through the batch path (the dedupe ledger, one transaction that also
// deletes what it applied). The first event of a key that fails becomes
// the key's head (its retry workflow starts with this failure as attempt
// 1, recorded with the key as a pending start until it is durable); the
// events after it stay parked. A key whose incident dead-lettered
// everything has its parked events dead-lettered in order. A key left with
// no parked event is unblocked in the same transaction.

// releaseLimit bounds the parked events one release run reads (one
// transaction), as MaxPollRecords bounds a batch.
const releaseLimit = 3000

// maxRunsBetweenBatches bounds the release runs between two batches, so
// fresh events keep moving while a large backlog drains.
const maxRunsBetweenBatches = 4

// between releases (or dead-letters) the parked events of due keys. False
// when the partition stopped first; a failure leaves the keys due, and the
// watcher wakes the partition again.
func (r *orderedRouter) between() bool {
	p := r.p
	for run := 0; run < maxRunsBetweenBatches; run++ {
		keys := r.dueKeys()
		if len(keys) == 0 || p.ctx.Err() != nil {
			break
		}
		var dead, release []parking.Blocked
		for _, b := range keys {
			if b.State == parking.HeadDeadLetterAll {
				dead = append(dead, b)
			} else {
				release = append(release, b)
			}
		}
		more := false
		if len(dead) > 0 {
			m, ok := r.deadLetterParked(dead)
			if !ok {
				break
			}
			more = more || m
		}
		if len(release) > 0 {
			var m, ok bool
			if p.opts.Mode == config.ModeWorkflow {
				m, ok = r.promote(release)
			} else {
				m, ok = r.release(release)
			}
			if !ok {
				break
			}
			more = more || m
		}
		if !more {
			break
		}
	}
	return p.ctx.Err() == nil
}

// dueKeys lists the keys due for release with their heads.
func (r *orderedRouter) dueKeys() []parking.Blocked {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]parking.Blocked, 0, len(r.due))
	for k := range r.due {
		b := r.keys[k]
		if b == nil {
			delete(r.due, k)
			continue
		}
		out = append(out, parking.Blocked{Key: k, Head: b.head, State: b.state, Parked: b.parked})
	}
	return out
}

// read returns the next parked events of keys, in order; ok false when the
// partition stopped first.
func (r *orderedRouter) read(keys []parking.Blocked) ([]parking.Parked, bool) {
	p := r.p
	ks := make([]parking.Key, len(keys))
	for i, b := range keys {
		ks[i] = b.Key
	}
	var rows []parking.Parked
	ok := p.until(p.log, "database", "cannot read parked events", func(ctx context.Context) (err error) {
		rows, err = parking.ParkedOf(ctx, r.store.Pool(), p.topic, p.id, ks, releaseLimit)
		return err
	})
	return rows, ok
}

// release applies one run of the parked events of keys. more reports that
// some are left to read.
func (r *orderedRouter) release(keys []parking.Blocked) (more, ok bool) {
	rows, ok := r.read(keys)
	if !ok {
		return false, false
	}
	if !r.releaseRows(keys, rows) {
		return false, false
	}
	return len(rows) == releaseLimit, true
}

// releaseRows applies rows (the parked events of keys, in order) in one
// transaction, isolating a run that fails as a whole while the database
// answers by halves, as a batch is.
func (r *orderedRouter) releaseRows(keys []parking.Blocked, rows []parking.Parked) bool {
	p := r.p
	if len(rows) == 0 {
		return r.unblock(keys)
	}
	evs := make([]event.Envelope, len(rows))
	items := make([]item, len(rows))
	for i, row := range rows {
		evs[i] = row.Retry.Event
		items[i] = item{env: row.Retry.Event}
	}
	index := make(map[*event.Envelope]int, len(evs))
	for i := range evs {
		index[&evs[i]] = i
	}
	incidentHeld := map[parking.Key]bool{} // keys released from an incident
	for _, b := range keys {
		incidentHeld[b.Key] = parking.IsIncident(b.Head)
	}
	var hr holdAndRerun
	hold := func(proj string, ev *event.Envelope) bool {
		i := index[ev]
		if proj != rows[i].Retry.Projection {
			return true // the row is one (projection, event) pair
		}
		return hr.holds(parking.KeyOf(rows[i].Retry), i)
	}
	var (
		startedAt time.Time
		heads     []parking.Blocked
		applied   int
		fromInc   map[string]int // projection -> events applied off an incident
		left      map[parking.Key]int64
		drained   []parking.Key
	)
	beforeCommit := func(ctx context.Context, tx pgx.Tx, outs []projection.Result) error {
		if err := r.fence(ctx, tx); err != nil {
			return err
		}
		fails, err := hr.check(outs, func(o projection.Result) (parking.Key, bool) {
			return parking.KeyOf(rows[o.Index].Retry), true
		})
		if err != nil {
			return err
		}
		var seqs []int64
		left = map[parking.Key]int64{}
		fromInc = map[string]int{}
		for _, o := range outs {
			if o.Status != projection.StatusApplied && o.Status != projection.StatusDuplicate {
				continue
			}
			k := parking.KeyOf(rows[o.Index].Retry)
			seqs = append(seqs, rows[o.Index].Seq)
			left[k]++
			if incidentHeld[k] {
				fromInc[k.Projection]++
			}
		}
		applied = len(seqs)
		heads = heads[:0]
		for k, at := range fails {
			o := outs[resultOf(outs, at)]
			if id := p.b.holdingOf(o, &rows[at].Retry.Event); id != "" {
				// It fails as a holding incident does: it stays parked, and
				// its key waits behind the incident.
				heads = append(heads, parking.Blocked{Key: k, Head: id, State: parking.HeadActive})
				continue
			}
			in := rows[at].Retry
			in.Mode = config.ModeInline
			in.FirstAttempt = firstAttempt(o, startedAt)
			in.Retry, in.ReplayWindow = p.opts.Retry, p.opts.ReplayWindow
			heads = append(heads, parking.Blocked{Key: k, Head: in.WorkflowID(), State: parking.HeadActive, PendingStart: &in})
			seqs = append(seqs, rows[at].Seq)
			left[k]++
		}
		for k, at := range hr.after {
			if _, failed := fails[k]; failed || at >= 0 {
				continue
			}
			// Held whole for the batch to be stable, without a failure in
			// this run: its first parked event heads it, run in Temporal
			// from attempt 1.
			for i := range rows {
				if parking.KeyOf(rows[i].Retry) != k {
					continue
				}
				in := rows[i].Retry
				in.Mode, in.FirstAttempt = config.ModeWorkflow, nil
				in.Retry, in.ReplayWindow = p.opts.Retry, p.opts.ReplayWindow
				heads = append(heads, parking.Blocked{Key: k, Head: in.WorkflowID(), State: parking.HeadActive, PendingStart: &in})
				seqs = append(seqs, rows[i].Seq)
				left[k]++
				break
			}
		}
		if err := parking.Unpark(ctx, tx, p.topic, p.id, seqs); err != nil {
			return err
		}
		if err := parking.Block(ctx, tx, p.topic, p.id, heads); err != nil {
			return err
		}
		drained, err = parking.Unblock(ctx, tx, p.topic, p.id, keys)
		return err
	}
	apply := func(ctx context.Context) ([]projection.Result, error) {
		startedAt = time.Now().UTC()
		return hr.run(ctx, func() ([]projection.Result, error) {
			return p.opts.Engine.ApplyBatch(ctx, evs, projection.ApplyOptions{Hold: hold, BeforeCommit: beforeCommit, HoldAfterFailure: true, Guard: true})
		}, nil)
	}
	_, res := p.applyThroughOutage(items, nil, apply)
	switch res.verdict {
	case verdictStopped:
		return false
	case verdictIsolate:
		if len(rows) > 1 {
			h := len(rows) / 2
			if !r.releaseRows(keys, rows[:h]) {
				return false
			}
			rest, ok := r.stillReleased(keys, rows[:h], rows[h:])
			return ok && r.releaseRows(keys, rest)
		}
		return r.headFailedAlone(rows[0], res.err)
	}
	r.released(left, applied, heads, drained)
	for proj, n := range fromInc {
		r.inc.CountReleased(proj, n)
	}
	for _, h := range heads {
		if h.PendingStart != nil && !r.startHead(*h.PendingStart) {
			return false
		}
	}
	return true
}

// stillReleased returns those of rows (the second half of a split release)
// whose key may still go on after the first half (done): not a key that
// took a new head there, nor one with an event of done still parked (held
// behind a failure that then cleared): their events stay parked, in order.
func (r *orderedRouter) stillReleased(keys []parking.Blocked, done, rows []parking.Parked) ([]parking.Parked, bool) {
	p := r.p
	seqs := make([]int64, len(done))
	for i, row := range done {
		seqs[i] = row.Seq
	}
	var left map[parking.Key]bool
	if !p.until(p.log, "database", "cannot read the parked events of a split release", func(ctx context.Context) (err error) {
		left, err = parking.StillParked(ctx, r.store.Pool(), p.topic, p.id, seqs)
		return err
	}) {
		return nil, false
	}
	headOf := make(map[parking.Key]string, len(keys))
	for _, b := range keys {
		headOf[b.Key] = b.Head
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := rows[:0:0]
	for _, row := range rows {
		k := parking.KeyOf(row.Retry)
		if b := r.keys[k]; b != nil && b.head == headOf[k] && !left[k] {
			out = append(out, row)
		}
	}
	return out, true
}

// resultOf is the position in outs of the result of row i (one pair each).
func resultOf(outs []projection.Result, i int) int {
	for j, o := range outs {
		if o.Index == i {
			return j
		}
	}
	return 0
}

// headFailedAlone makes a parked event whose release fails as a whole, on
// its own, while the database answers, its key's head: attempt 1 failed
// (sql) and its retry workflow runs the rest.
func (r *orderedRouter) headFailedAlone(row parking.Parked, cause error) bool {
	p := r.p
	in := row.Retry
	in.Mode = config.ModeInline
	in.FirstAttempt = contract.FirstAttempt(time.Now().UTC(), string(contract.KindSQL), cause, 0)
	in.Retry, in.ReplayWindow = p.opts.Retry, p.opts.ReplayWindow
	head := parking.Blocked{Key: parking.KeyOf(in), Head: in.WorkflowID(), State: parking.HeadActive, PendingStart: &in}
	if !p.until(p.log, "database", "cannot record a released event's retry workflow as its key's head", func(ctx context.Context) error {
		return r.inFencedTx(ctx, func(tx pgx.Tx) error {
			if err := parking.Unpark(ctx, tx, p.topic, p.id, []int64{row.Seq}); err != nil {
				return err
			}
			return parking.Block(ctx, tx, p.topic, p.id, []parking.Blocked{head})
		})
	}) {
		return false
	}
	r.released(map[parking.Key]int64{head.Key: 1}, 0, []parking.Blocked{head}, nil)
	return r.startHead(in)
}

// released brings the partition's keys up to a release that committed:
// left counts, per key, the parked events that left the table (applied, or
// made the key's new head); heads are the new heads, drained the keys
// unblocked.
func (r *orderedRouter) released(left map[parking.Key]int64, applied int, heads []parking.Blocked, drained []parking.Key) {
	p := r.p
	now := time.Now()
	var gone int64
	r.mu.Lock()
	for k, n := range left {
		gone += n
		if b := r.keys[k]; b != nil {
			b.parked = max(b.parked-n, 0)
		}
	}
	type joined struct {
		id, projection string
		parked         int64
	}
	var joins []joined
	for _, h := range heads {
		if b := r.keys[h.Key]; b != nil {
			b.head, b.state, b.since, b.nextCheck, b.every = h.Head, parking.HeadActive, now, now, 0
			b.pending = h.PendingStart != nil
			if parking.IsIncident(h.Head) {
				joins = append(joins, joined{h.Head, h.Projection, b.parked})
			}
		}
		delete(r.due, h.Key)
	}
	for _, k := range drained {
		if _, ok := r.keys[k]; ok {
			delete(r.keys, k)
			delete(r.due, k)
			p.m.blockedKeys.Dec()
			p.m.unblocked.WithLabelValues("released").Inc()
		}
	}
	r.parked = max(r.parked-gone, 0)
	r.mu.Unlock()
	// A key that joined a holding incident brings its parked events to it:
	// the one that failed again and those behind it.
	for _, j := range joins {
		if j.parked > 0 {
			r.inc.CountHeld(j.id, j.projection, 0, int(j.parked), nil)
		}
	}
	p.m.parkedNow.Sub(float64(gone))
	p.m.parkedEvents.WithLabelValues("released").Add(float64(applied))
	p.m.parkedEvents.WithLabelValues("head").Add(float64(len(heads)))
	for _, k := range drained {
		p.log.Info("key unblocked: its parked events are all released", "event", "projection_key_unblocked",
			"projectionName", k.Projection, "forkId", k.ForkID, "entityId", k.EntityID)
	}
	if gone > 0 || len(drained) > 0 {
		p.log.Info("parked events released", "event", "projection_parked_released", "released", applied,
			"failedAgain", len(heads), "keysUnblocked", len(drained))
	}
}

// unblock clears those of keys that have no parked event left, in a
// transaction of its own.
func (r *orderedRouter) unblock(keys []parking.Blocked) bool {
	p := r.p
	var drained []parking.Key
	if !p.until(p.log, "database", "cannot unblock released keys", func(ctx context.Context) error {
		return r.inFencedTx(ctx, func(tx pgx.Tx) (err error) {
			drained, err = parking.Unblock(ctx, tx, p.topic, p.id, keys)
			return err
		})
	}) {
		return false
	}
	r.mu.Lock()
	for _, b := range keys {
		// A key not drained (its head changed meanwhile) waits for that head.
		delete(r.due, b.Key)
	}
	r.mu.Unlock()
	r.released(nil, 0, nil, drained)
	return true
}

// deadLetterParked dead-letters, in order, the parked events of keys whose
// incident dead-lettered everything it held, then unblocks the keys left
// with none. A DLQ record may repeat (a bridge killed between the record
// and the delete publishes it again), never go missing.
func (r *orderedRouter) deadLetterParked(keys []parking.Blocked) (more, ok bool) {
	p := r.p
	rows, ok := r.read(keys)
	if !ok {
		return false, false
	}
	if len(rows) == 0 {
		return false, r.unblock(keys)
	}
	headOf := map[parking.Key]string{}
	for _, b := range keys {
		headOf[b.Key] = b.Head
	}
	now := time.Now().UTC()
	seqs := make([]int64, 0, len(rows))
	letters := make([]dlq.Keyed, 0, len(rows))
	logs := make([]*slog.Logger, 0, len(rows))
	for _, row := range rows {
		in := row.Retry
		dl := bridgeLetter(in, now, "held by incident "+headOf[parking.KeyOf(in)]+", dead-lettered by the dead-letter-all signal")
		letters = append(letters, dlq.Keyed{Key: in.Key, Record: dlq.RunRecord(dl, now)})
		logs = append(logs, p.parkedLog(in))
		seqs = append(seqs, row.Seq)
	}
	if !p.publishDeadLetters(logs, "held event", letters) {
		return false, false
	}
	for _, row := range rows {
		r.inc.CountDeadLettered(row.Retry.Projection)
	}
	var drained []parking.Key
	if !p.until(p.log, "database", "cannot delete dead-lettered parked events", func(ctx context.Context) error {
		return r.inFencedTx(ctx, func(tx pgx.Tx) (err error) {
			if err := parking.Unpark(ctx, tx, p.topic, p.id, seqs); err != nil {
				return err
			}
			drained, err = parking.Unblock(ctx, tx, p.topic, p.id, keys)
			return err
		})
	}) {
		return false, false
	}
	p.m.parkedEvents.WithLabelValues("dead_lettered").Add(float64(len(rows)))
	left := map[parking.Key]int64{}
	for _, row := range rows {
		left[parking.KeyOf(row.Retry)]++
	}
	r.released(left, 0, nil, nil)
	r.mu.Lock()
	for _, k := range drained {
		if _, ok := r.keys[k]; ok {
			delete(r.keys, k)
			delete(r.due, k)
			p.m.blockedKeys.Dec()
			p.m.unblocked.WithLabelValues("dead_lettered").Inc()
		}
	}
	r.mu.Unlock()
	for _, k := range drained {
		p.log.Info("key unblocked: its parked events are all dead-lettered", "event", "projection_key_unblocked",
			"projectionName", k.Projection, "forkId", k.ForkID, "entityId", k.EntityID)
	}
	return len(rows) == releaseLimit, true
}

// promote (workflow mode) makes the first parked event of each key its next
// head, started in Temporal from attempt 1; a key with none is unblocked.
func (r *orderedRouter) promote(keys []parking.Blocked) (more, ok bool) {
	p := r.p
	rows, ok := r.read(keys)
	if !ok {
		return false, false
	}
	firsts := map[parking.Key]parking.Parked{}
	for _, row := range rows {
		k := parking.KeyOf(row.Retry)
		if _, ok := firsts[k]; !ok {
			firsts[k] = row
		}
	}
	var heads []parking.Blocked
	var seqs []int64
	var rest []parking.Blocked
	for _, b := range keys {
		row, ok := firsts[b.Key]
		if !ok {
			rest = append(rest, b)
			continue
		}
		in := row.Retry
		in.Mode = config.ModeWorkflow
		in.FirstAttempt = nil
		heads = append(heads, parking.Blocked{Key: b.Key, Head: in.WorkflowID(), State: parking.HeadActive, PendingStart: &in})
		seqs = append(seqs, row.Seq)
	}
	if len(heads) > 0 && !p.until(p.log, "database", "cannot record the next heads of released keys", func(ctx context.Context) error {
		return r.inFencedTx(ctx, func(tx pgx.Tx) error {
			if err := parking.Unpark(ctx, tx, p.topic, p.id, seqs); err != nil {
				return err
			}
			return parking.Block(ctx, tx, p.topic, p.id, heads)
		})
	}) {
		return false, false
	}
	if len(heads) > 0 {
		left := map[parking.Key]int64{}
		for _, h := range heads {
			left[h.Key] = 1
		}
		r.released(left, 0, heads, nil)
		for _, h := range heads {
			if !r.startHead(*h.PendingStart) {
				return false, false
			}
		}
	}
	if len(rest) > 0 && !r.unblock(rest) {
		return false, false
	}
	return false, true
}

// startHead starts the retry workflow of a key's new head without holding
// the partition (a MaxInflight slot, then a goroutine), and clears the
// key's pending start once the workflow is durable. A head Temporal
// refuses is dead-lettered and settled, so the key's next events go on.
// False when the partition stopped first.
func (r *orderedRouter) startHead(in contract.RetryInput) bool {
	p := r.p
	if !p.acquireSlot() {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.releaseSlot()
		log := p.parkedLog(in)
		outage, end := p.startUntilDurable(log, nil, in)
		switch end {
		case handoffStopped:
			return // the pending start stays: the next owner starts it
		case handoffStarted:
			p.m.handedOff.WithLabelValues(string(in.Mode)).Inc()
			logHandOff(log, in, outage)
		}
		r.headStarted(in, end)
	}()
	return true
}
