package starter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// Entity ordering (CAUSET_ORDERING=entity, CONTRACT §6): while a
// (projection, fork, entity) key has a head — the retry workflow of its
// failed event, a dead letter held under CAUSET_DLQ_HOLD_ENTITY, or the
// incident that holds it — its later events are parked in PostgreSQL
// (package parking), in the transaction of the batch they belong to,
// before their offsets may be committed. No workflow waits for them. Once
// the head settles (the worker records it in the key's row, the head
// watcher of heads.go reads it) the partition releases the key's parked
// events in order, between batches and through the same batch path as
// fresh events (release.go). An event of a release that fails becomes the
// key's new head; the events after it stay parked.
//
// The partition worker is the only writer of its keys: batches and
// releases run one after the other on it, so a key is never parked and
// released at once. The watcher only marks keys due.

// orderedRouter is a partition's blocked keys and their parked events.
type orderedRouter struct {
	p     *partition
	store *parking.Store
	inc   *incident.Registry // nil when incidents are off

	mu     sync.Mutex
	keys   map[parking.Key]*blockedKey
	parked int64 // events parked in the partition
	due    map[parking.Key]bool
	wakeCh chan struct{}
	// atBound: the partition waits at a bound of parked events (logged once).
	atBound bool
	// owner is this bridge's claim of the partition (parking.Claim): every
	// transaction that writes its keys checks it (fence).
	owner parking.Owner
}

// blockedKey is what the partition knows of one of its blocked keys.
type blockedKey struct {
	head   string
	state  parking.HeadState
	parked int64
	// through is the highest offset of the key's events taken: a
	// redelivered event at or below it was handled already.
	through int64
	since   time.Time
	// nextCheck and every schedule the watcher's look at a head whose
	// settling was never recorded (heads.go).
	nextCheck time.Time
	every     time.Duration
	// pending: the head's retry workflow may not be started yet (its start
	// is recorded with the key until it is durable). Not described, never
	// released for want of a run.
	pending bool
	// describeSoon: the head's run was found, not begun, and had
	// dead-lettered before: the watcher describes it at its next look.
	describeSoon bool
}

func newOrderedRouter(p *partition) *orderedRouter {
	return &orderedRouter{p: p, store: p.opts.Parking, inc: p.b.inc,
		keys: map[parking.Key]*blockedKey{}, due: map[parking.Key]bool{}, wakeCh: make(chan struct{}, 1)}
}

func (r *orderedRouter) wake() <-chan struct{} { return r.wakeCh }

func (r *orderedRouter) signal() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

func keyOf(projection string, ev *event.Envelope) parking.Key {
	return parking.Key{Projection: projection, ForkID: ev.ForkID, EntityID: ev.EntityID}
}

// releasable reports whether a key whose head stands at state lets its
// parked events go (dead-lettered only when dead letters do not hold their
// entity).
func (r *orderedRouter) releasable(head string, state parking.HeadState) bool {
	switch state {
	case parking.HeadSettled, parking.HeadDeadLetterAll:
		return true
	case parking.HeadDeadLettered:
		return !r.p.opts.HoldEntity
	case parking.HeadActive:
		// Under policy dead-letter nothing holds: keys an incident parked
		// under hold (the policy was switched) are released in order.
		return parking.IsIncident(head) && !r.inc.Holding()
	}
	return false
}

// open loads the partition's blocked keys, starts the heads a release
// recorded but may not have started, and marks due the keys whose head
// has moved on.
func (r *orderedRouter) open() bool {
	p := r.p
	// The claim comes first: it waits for the transactions of a previous
	// owner still under way, and fails the later ones, so what is loaded
	// next is what that owner left.
	if !p.until(p.log, "database", "cannot claim the partition", func(ctx context.Context) (err error) {
		r.owner, err = parking.Claim(ctx, r.store.Pool(), p.opts.Group, p.topic, p.id, p.b.owner)
		return err
	}) {
		return false
	}
	var loaded []parking.Blocked
	if !p.until(p.log, "database", "cannot load blocked keys", func(ctx context.Context) (err error) {
		loaded, err = r.store.Load(ctx, p.topic, p.id)
		return err
	}) {
		return false
	}
	now := time.Now()
	r.mu.Lock()
	var pending []parking.Blocked
	for _, b := range loaded {
		r.keys[b.Key] = &blockedKey{head: b.Head, state: b.State, parked: b.Parked, through: b.Through, since: b.BlockedAt, nextCheck: now,
			pending: b.PendingStart != nil}
		r.parked += b.Parked
		if r.releasable(b.Head, b.State) {
			r.due[b.Key] = true
		}
		if b.PendingStart != nil {
			pending = append(pending, b)
		}
	}
	r.mu.Unlock()
	p.m.blockedKeys.Add(float64(len(loaded)))
	p.m.parkedNow.Add(float64(r.parked))
	if len(loaded) > 0 {
		p.log.Info("blocked keys loaded", "blockedKeys", len(loaded), "parked", r.parked)
	}
	for _, b := range pending {
		if !r.startHead(*b.PendingStart) {
			return false
		}
	}
	r.signal()
	return true
}

// fence checks, in tx, that the partition is still this bridge's: a
// bridge that lost it to another (a newer claim) stops the partition, and
// the transaction rolls back with ErrFenced.
func (r *orderedRouter) fence(ctx context.Context, tx pgx.Tx) error {
	err := r.owner.Check(ctx, tx)
	if errors.Is(err, parking.ErrFenced) {
		r.p.fenced(err)
	}
	return err
}

// inFencedTx runs fn in a transaction that first checks the fence.
func (r *orderedRouter) inFencedTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, r.store.Pool(), func(tx pgx.Tx) error {
		if err := r.fence(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// close drops the partition's keys from the gauges when it stops.
func (r *orderedRouter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.m.blockedKeys.Sub(float64(len(r.keys)))
	r.p.m.parkedNow.Sub(float64(r.parked))
	r.keys, r.parked = map[parking.Key]*blockedKey{}, 0
}

// moved takes the heads the watcher found settled: their keys are due.
func (r *orderedRouter) moved(heads []parking.Blocked) {
	r.mu.Lock()
	for _, b := range heads {
		k := r.keys[b.Key]
		if k == nil || k.head != b.Head {
			continue
		}
		k.state = b.State
		if r.releasable(k.head, k.state) {
			r.due[b.Key] = true
		}
	}
	n := len(r.due)
	r.mu.Unlock()
	// Keys still due from an earlier poll (a release that failed) are tried again.
	if n > 0 {
		r.signal()
	}
}

// route releases what is due, waits while the partition is at a bound of
// parked events, then applies the batch with the hold rules (inline mode)
// or hands every pair off in order (workflow mode).
func (r *orderedRouter) route(seg *segment, items []item, last *kgo.Record) bool {
	if !r.between() || !r.waitBounds(items) {
		return false
	}
	if r.p.opts.Mode == config.ModeWorkflow {
		return r.handOffOrdered(seg, items)
	}
	return r.applyOrdered(seg, items, last)
}

// waitBounds holds the batch while the partition's parked events, or those
// of a key the batch has events of, are at their bound: releases go on
// meanwhile, fetching pauses as the queue fills. Backpressure, never a
// drop. False when the partition stopped first.
func (r *orderedRouter) waitBounds(items []item) bool {
	p := r.p
	o := p.opts
	for {
		key, n := r.overBound(items)
		if n == 0 {
			if r.atBound {
				r.atBound = false
				p.log.Info("parked events below their bound again: partition resumed", "event", "projection_park_bound_cleared")
			}
			return true
		}
		if !r.atBound {
			r.atBound = true
			p.m.parkBound.Inc()
			attrs := []any{"event", "projection_park_bound", "parked", n}
			if key != nil {
				attrs = append(attrs, "projectionName", key.Projection, "forkId", key.ForkID, "entityId", key.EntityID,
					"maxPerKey", o.MaxParkedPerKey)
			} else {
				attrs = append(attrs, "maxPerPartition", o.MaxParkedPerPartition)
			}
			p.log.Warn("parked events at their bound: the partition waits for releases before its next batch", attrs...)
		}
		if !r.between() {
			return false
		}
		select {
		case <-r.wakeCh:
		case <-time.After(time.Second):
		case <-p.ctx.Done():
			return false
		}
		p.beat() // a wait for releases is a known wait, not a stall
	}
}

// overBound returns the parked count at a bound (0: none is), with the key
// at its bound (nil: the partition's).
func (r *orderedRouter) overBound(items []item) (*parking.Key, int64) {
	o := r.p.opts
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parked >= o.MaxParkedPerPartition {
		return nil, r.parked
	}
	if len(r.keys) == 0 {
		return nil, 0
	}
	for _, it := range items {
		for _, proj := range it.projections {
			k := keyOf(proj, &it.env)
			if b := r.keys[k]; b != nil && b.parked >= o.MaxParkedPerKey {
				return &k, b.parked
			}
		}
	}
	return nil, 0
}

// heldKey is a blocked key as a batch sees it.
type heldKey struct {
	head    string
	through int64
}

// heads returns the blocked keys among items' pairs.
func (r *orderedRouter) heads(items []item) map[parking.Key]heldKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return nil
	}
	var out map[parking.Key]heldKey
	for _, it := range items {
		for _, proj := range it.projections {
			k := keyOf(proj, &it.env)
			if b := r.keys[k]; b != nil {
				if out == nil {
					out = map[parking.Key]heldKey{}
				}
				out[k] = heldKey{b.head, b.through}
			}
		}
	}
	return out
}

// applyOrdered is applyInline with entity ordering: the pairs of blocked
// keys are held and parked behind their heads, a key's first failure makes
// it blocked (its retry workflow, or under hold a holding incident, is its
// head) and parks its later pairs, all in the batch's transaction; once it
// committed the new heads are handed to Temporal.
func (r *orderedRouter) applyOrdered(seg *segment, items []item, last *kgo.Record) bool {
	p := r.p
	evs := envelopes(items)
	heads := r.heads(items)
	var hr holdAndRerun
	var index map[*event.Envelope]int
	hold := func(proj string, ev *event.Envelope) bool {
		k := keyOf(proj, ev)
		if _, ok := heads[k]; ok {
			return true
		}
		if len(hr.after) == 0 {
			return false
		}
		if index == nil {
			index = make(map[*event.Envelope]int, len(evs))
			for i := range evs {
				index[&evs[i]] = i
			}
		}
		return hr.holds(k, index[ev])
	}
	var (
		plan      batchPlan
		startedAt time.Time
	)
	beforeCommit := func(ctx context.Context, tx pgx.Tx, outs []projection.Result) error {
		if err := r.fence(ctx, tx); err != nil {
			return err
		}
		// Keys blocked before the batch are held whole: not the rule's.
		if _, err := hr.check(outs, func(o projection.Result) (parking.Key, bool) {
			k := keyOf(o.Projection, &evs[o.Index])
			_, blocked := heads[k]
			return k, !blocked
		}); err != nil {
			return err
		}
		return plan.decide(ctx, tx, r, items, outs, heads, startedAt)
	}
	outcomes, res := p.applyThroughOutage(items, last, func(ctx context.Context) ([]projection.Result, error) {
		// Attempt 1 starts with this try's first run: a try after an outage
		// starts it afresh, so the schedule counts from the attempt that ran.
		startedAt = time.Now().UTC()
		// Guarded too: an event read again after its entity moved on (its
		// offset rewound, say, after it was dead-lettered and its key
		// released) is refused, not applied out of order.
		return hr.run(ctx, func() ([]projection.Result, error) {
			return p.opts.Engine.ApplyBatch(ctx, evs, projection.ApplyOptions{Hold: hold, BeforeCommit: beforeCommit, HoldAfterFailure: true, Guard: true})
		}, func(run int) {
			p.log.Debug("failed key had later events applied in the same batch: batch rerun with them held",
				"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "run", run)
		})
	})
	switch res.verdict {
	case verdictStopped:
		return false
	case verdictIsolate:
		return p.isolate(seg, items, res.err, r.applyOrdered)
	}
	p.countOutcomes(items, outcomes)
	r.committed(&plan)
	for _, h := range plan.handOffs {
		if h.failed != nil {
			p.b.noteFailure(*h.failed, &items[h.index].env)
		}
		if !r.handOffHead(seg, items[h.index].rec, h.in) {
			return false
		}
	}
	return true
}

// handOffHead starts a new head's retry workflow as handOff does and then
// clears its key's pending start: from the batch's commit until then, a
// bridge that takes the partition over starts it from the key's row.
func (r *orderedRouter) handOffHead(seg *segment, rec *kgo.Record, in contract.RetryInput) bool {
	p := r.p
	return p.handOffThen(seg, rec, in, func(end handoffEnd) { r.headStarted(in, end) })
}

// headStarted records that a head's start ended: its pending start is
// cleared, and a head Temporal refused (dead-lettered) is settled, so its
// key's parked events go on.
func (r *orderedRouter) headStarted(in contract.RetryInput, end handoffEnd) {
	p := r.p
	r.mu.Lock()
	if k := r.keys[parking.KeyOf(in)]; k != nil && k.head == in.WorkflowID() {
		k.pending = false
	}
	r.mu.Unlock()
	if end == handoffDeadLettered {
		p.until(p.log, "database", "cannot settle a head Temporal refused", func(ctx context.Context) error {
			_, err := parking.SetHeadState(ctx, r.store.Pool(), in.WorkflowID(), parking.HeadSettled)
			return err
		})
	}
	var before bool
	p.until(p.log, "database", "cannot record a started head", func(ctx context.Context) (err error) {
		before, err = r.store.Started(ctx, p.topic, p.id, parking.KeyOf(in), in.WorkflowID())
		return err
	})
	if before {
		// An event read again after its key was released (offsets lost):
		// its run dead-lettered long ago and may be settled already. It is
		// described at the watcher's next look instead of after a whole
		// schedule.
		r.mu.Lock()
		if k := r.keys[parking.KeyOf(in)]; k != nil && k.head == in.WorkflowID() {
			k.describeSoon = true
		}
		r.mu.Unlock()
	}
}

// handOffOrdered is workflow mode with entity ordering. Every pair runs
// attempt 1 in its own retry workflow, so a key is blocked while any of
// its pairs is in Temporal: a pair of a key that is not blocked blocks it
// and starts as its head; a later pair of a blocked key is parked, and
// started as the key's next head once the one before has settled
// (release.go).
func (r *orderedRouter) handOffOrdered(seg *segment, items []item) bool {
	p := r.p
	if !p.refreshCatalog() {
		return false
	}
	var (
		plan  batchPlan
		heads = r.heads(items)
		added = map[parking.Key]string{}
	)
	for i, it := range items {
		projs := p.opts.Engine.Projections(it.env.EventType)
		if len(projs) == 0 {
			p.m.skipped.Inc()
		}
		for _, proj := range projs {
			k := keyOf(proj, &it.env)
			in := p.retryInput(it, proj, nil)
			held, blocked := heads[k]
			_, blockedHere := added[k]
			switch {
			case blocked && it.rec.Offset <= held.through:
				plan.redelivered++
			case blocked || blockedHere:
				plan.park(p, it, in)
			default:
				added[k] = in.WorkflowID()
				plan.block(k, in.WorkflowID(), it.rec.Offset, &in)
				plan.handOffs = append(plan.handOffs, pendingHandOff{index: i, in: in})
			}
		}
	}
	// The blocks and parked events are durable before any head of theirs is
	// started, so a bridge that takes the partition over holds the keys too.
	if (len(plan.blocked) > 0 || len(plan.rows) > 0) && !p.until(p.log, "database", "cannot record blocked keys", func(ctx context.Context) error {
		return r.inFencedTx(ctx, func(tx pgx.Tx) error { return plan.write(ctx, tx, r) })
	}) {
		return false
	}
	r.committed(&plan)
	for _, h := range plan.handOffs {
		if !r.handOffHead(seg, items[h.index].rec, h.in) {
			return false
		}
	}
	return true
}

// batchPlan is what one run of a batch decides for its blocked keys,
// written in its transaction and acted on once it committed.
type batchPlan struct {
	blocked  []parking.Blocked // keys the batch blocks
	rows     []contract.RetryInput
	rowIDs   []string // the incident each row is parked under ("" for a retry head)
	inserted []bool   // of rows, those parked now (not parked before)
	handOffs []pendingHandOff
	opened   []contract.IncidentInput
	failed   []bool // of rows, the failures (else pairs held behind one)
	// redelivered counts the pairs of blocked keys at or below their
	// Through: read again after a restart, handled already.
	redelivered int
}

// pendingHandOff is a head to start once the batch committed.
type pendingHandOff struct {
	index  int
	in     contract.RetryInput
	failed *projection.Result // its failed attempt 1, counted towards incidents
}

func (pl *batchPlan) block(k parking.Key, head string, offset int64, start *contract.RetryInput) {
	pl.blocked = append(pl.blocked, parking.Blocked{Key: k, Head: head, State: parking.HeadActive, Through: offset, PendingStart: start})
}

func (pl *batchPlan) park(p *partition, it item, in contract.RetryInput) {
	if in.TraceContext == nil {
		if s := recordSpan(it.rec); s != nil {
			in.TraceContext = traceContextOf(s)
		}
	}
	pl.rows = append(pl.rows, in)
	pl.rowIDs = append(pl.rowIDs, "")
	pl.failed = append(pl.failed, in.FirstAttempt != nil)
}

// decide, in the batch's transaction, parks the held pairs of blocked keys
// (but those redelivered, at or below the key's Through) and the pairs
// after each key's first failure, and makes each newly failing key's
// failure its head (under hold, a holding incident's failure is parked and
// the incident is the head). A key held in a rerun without a failure in
// this run (a failure that did not repeat) takes its first held pair as
// head, run in Temporal from attempt 1.
func (pl *batchPlan) decide(ctx context.Context, tx pgx.Tx, r *orderedRouter, items []item, outs []projection.Result,
	heads map[parking.Key]heldKey, startedAt time.Time) error {
	*pl = batchPlan{}
	p := r.p
	now := time.Now()
	added := map[parking.Key]string{}
	for _, o := range outs {
		if o.Status != projection.StatusFailed && o.Status != projection.StatusHeld {
			continue
		}
		it := items[o.Index]
		k := keyOf(o.Projection, &it.env)
		var first *contract.Attempt
		if o.Status == projection.StatusFailed {
			first = firstAttempt(o, startedAt)
		}
		in := p.retryInput(it, o.Projection, first)
		if held, blocked := heads[k]; blocked {
			if it.rec.Offset <= held.through {
				pl.redelivered++
				continue
			}
			in.FirstAttempt = nil
			pl.park(p, it, in)
			pl.rowIDs[len(pl.rowIDs)-1] = incidentOf(held.head)
			continue
		}
		if h, ok := added[k]; ok {
			// After the key's head in this batch: parked behind it,
			// attempted afresh when released.
			in.FirstAttempt = nil
			pl.park(p, it, in)
			pl.rowIDs[len(pl.rowIDs)-1] = incidentOf(h)
			continue
		}
		if first == nil {
			// Held in a rerun, its key's failure gone: it heads the key and
			// runs attempt 1 in Temporal.
			in.Mode = config.ModeWorkflow
			added[k] = in.WorkflowID()
			pl.block(k, in.WorkflowID(), it.rec.Offset, &in)
			pl.handOffs = append(pl.handOffs, pendingHandOff{index: o.Index, in: in})
			continue
		}
		id, open, err := r.holdingIncident(ctx, tx, pl, o, &it.env, now)
		if err != nil {
			return err
		}
		if id != "" {
			if open != nil {
				pl.opened = append(pl.opened, *open)
			}
			added[k] = id
			pl.block(k, id, it.rec.Offset, nil)
			pl.park(p, it, in)
			pl.rowIDs[len(pl.rowIDs)-1] = id
			continue
		}
		added[k] = in.WorkflowID()
		pl.block(k, in.WorkflowID(), it.rec.Offset, &in)
		oc := o
		pl.handOffs = append(pl.handOffs, pendingHandOff{index: o.Index, in: in, failed: &oc})
	}
	return pl.write(ctx, tx, r)
}

// incidentOf is head when it names an incident, else "".
func incidentOf(head string) string {
	if parking.IsIncident(head) {
		return head
	}
	return ""
}

// holdingIncident is, under policy hold, the holding incident a first
// failure belongs to ("" for none), opening it in tx when this failure
// makes its fingerprint reach the threshold.
func (r *orderedRouter) holdingIncident(ctx context.Context, tx pgx.Tx, pl *batchPlan, o projection.Result, env *event.Envelope,
	now time.Time) (string, *contract.IncidentInput, error) {
	inc := r.inc
	if !inc.Holding() {
		return "", nil, nil
	}
	id, open := inc.HeldBy(failureOf(o, env), now)
	for _, in := range pl.opened {
		if open != nil && in.Fingerprint == open.Fingerprint {
			return contract.IncidentWorkflowID(in.Projection, in.Fingerprint), nil, nil
		}
	}
	if open == nil {
		return id, nil, nil
	}
	holds, err := inc.Open(ctx, tx, *open)
	if err != nil || !holds {
		return "", nil, err
	}
	return contract.IncidentWorkflowID(open.Projection, open.Fingerprint), open, nil
}

// write records the plan in tx: the keys it blocks (before their parked
// events, whose count they keep), then the events it parks.
func (pl *batchPlan) write(ctx context.Context, tx pgx.Tx, r *orderedRouter) error {
	p := r.p
	if err := parking.Block(ctx, tx, p.topic, p.id, pl.blocked); err != nil {
		return err
	}
	inserted, err := parking.Park(ctx, tx, p.topic, p.id, pl.rows)
	if err != nil {
		return err
	}
	pl.inserted = inserted
	return nil
}

// committed brings the partition's keys up to a plan its transaction
// committed, and reports its parked events to their incidents.
func (r *orderedRouter) committed(pl *batchPlan) {
	p := r.p
	now := time.Now()
	var parked int64
	type count struct {
		projection   string
		failed, held int
		samples      []string
	}
	counts := map[string]*count{}
	r.mu.Lock()
	for _, b := range pl.blocked {
		if k := r.keys[b.Key]; k != nil {
			k.head, k.state, k.since, k.through = b.Head, parking.HeadActive, now, max(k.through, b.Through)
			k.pending = b.PendingStart != nil
			continue
		}
		r.keys[b.Key] = &blockedKey{head: b.Head, state: parking.HeadActive, since: now, nextCheck: now, through: b.Through,
			pending: b.PendingStart != nil}
		p.m.blockedKeys.Inc()
	}
	for i, in := range pl.rows {
		if !pl.inserted[i] {
			continue
		}
		parked++
		if k := r.keys[parking.KeyOf(in)]; k != nil {
			k.parked++
			k.through = max(k.through, in.Source.Offset)
		}
		if id := pl.rowIDs[i]; id != "" {
			c := counts[id]
			if c == nil {
				c = &count{projection: in.Projection}
				counts[id] = c
			}
			if pl.failed[i] {
				c.failed++
				if len(c.samples) < contract.MaxIncidentSamples {
					c.samples = append(c.samples, in.Event.EventID)
				}
			} else {
				c.held++
			}
		}
	}
	r.parked += parked
	r.mu.Unlock()
	p.m.parkedNow.Add(float64(parked))
	p.m.parkedEvents.WithLabelValues("parked").Add(float64(parked))
	for _, b := range pl.blocked {
		attrs := []any{"event", "projection_key_blocked", "projectionName", b.Projection, "forkId", b.ForkID, "entityId", b.EntityID,
			"headWorkflowId", b.Head}
		if parking.IsIncident(b.Head) {
			p.log.Info("key held by its incident: its later events are parked behind it", attrs...)
			continue
		}
		p.log.Info("key blocked: its later events are parked behind its head", attrs...)
	}
	if inc := r.inc; inc != nil {
		for _, in := range pl.opened {
			inc.Opened(in)
		}
		for id, c := range counts {
			inc.CountHeld(id, c.projection, c.failed, c.held, c.samples)
		}
	}
	if pl.redelivered > 0 {
		p.m.parkedEvents.WithLabelValues("redelivered").Add(float64(pl.redelivered))
	}
}
