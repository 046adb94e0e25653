package starter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// Ordering lanes (CAUSET_ORDERING=entity, CONTRACT §6).
//
// Each partition keeps the set of its blocked keys. The partition worker
// decides, once per batch and under the router's mu, which pairs of the batch are
// held (their key is blocked); those, and the failed attempt 1 of a key
// that becomes blocked, go to the partition's lane sender in partition
// order. In workflow mode every pair is handed off this way: a pair of a
// key that is not blocked blocks it as its head (handOffOrdered). The sender keeps a FIFO per key and sends each key's events one at
// a time, in partition order; different keys are sent concurrently (one
// drainer goroutine per key with queued events, each holding a slot of the
// bridge's MaxInflight semaphore).
//
// The failure that blocks a key (its head) is started as a plain retry
// workflow, one start as without ordering, and recorded with the block;
// most failing keys never see a later event, and then need no lane at all.
// Later events of the key go to its lane workflow with Update-with-Start,
// each carrying the head's workflow ID (RetryInput.WaitFor): the lane runs
// nothing of the key before the head has settled (contract.Settled),
// then runs its events in order as child retry workflows. An event counts
// in its segment's pending counter until it was started or its lane
// accepted it (or it was applied inline), so offsets never pass it.
//
// A key is unblocked in two ways, both under the router's mu and only when the sender
// holds no event of the key (queued == 0, counting the reservations the
// partition worker takes for a batch that holds the key):
//   - the lane refuses an event (LaneClosingErrorType): the key's drainer waits for
//     that lane run to complete (every event it accepted has run), then, if
//     this event is the key's only one, applies it inline in a transaction
//     that also deletes the key's row; the worker cannot decide anything
//     about the key meanwhile because the drainer holds the router's mu for that
//     transaction. No other event of the key is sent meanwhile: the key's
//     sends are sequential.
//   - the bridge's sweeper (sweep.go) sees the key's head settled and the
//     key's lane closed after the run that last accepted an event of the
//     key did: every accepted event has run and no other is on its way.
//
// (In workflow mode the refusal never applies inline: the event starts the
// lane's next run and the sweeper unblocks the key.) Either way no event of
// the key can be applied inline, or start as a new head, while an earlier
// one is still waiting in a lane.

// LaneClient is what the bridge needs of Temporal for lanes; a
// client.Client is one.
type LaneClient interface {
	NewWithStartWorkflowOperation(options client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation
	UpdateWithStartWorkflow(ctx context.Context, options client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
	GetWorkflow(ctx context.Context, workflowID string, runID string) client.WorkflowRun
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	GetWorkflowHistory(ctx context.Context, workflowID string, runID string, isLongPoll bool, filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
}

// laneJob is one event on its way to a lane, or, for the failed event
// that blocked its key (head), to a retry workflow of its own.
type laneJob struct {
	seg  *segment
	rec  *kgo.Record
	in   contract.RetryInput
	key  LaneKey
	head bool
}

// ordering is a partition's blocked keys and its lane sender's queues.
type laneRouter struct {
	mu      sync.Mutex
	blocked map[LaneKey]struct{}
	queued  map[LaneKey]int     // events of the key in the sender's queue or reserved by a batch
	lastRun map[LaneKey]string  // lane run that last accepted an event of the key
	head    map[LaneKey]string  // retry workflow started outside the lane by the failure that blocked the key
	recheck map[LaneKey]recheck // when the sweeper looks at the key again
	// recovered is the lost lane run (closed without completing) whose
	// events were last sent again (lanelost.go).
	recovered map[LaneKey]string
	// parked holds the keys with parked events (policy hold) and the
	// incident their next parked events belong to; drainMu serialises the
	// drains that release them (parked.go).
	parked  map[LaneKey]string
	drainMu sync.Mutex
	// headFP is the failure fingerprint of keys' heads (policy hold): a
	// key whose head failed as a holding incident does parks its events.
	headFP map[LaneKey]string
	// keyq is the sender's FIFO of each key, in partition order. A key is in
	// keyq while it is scheduled: waiting in ready for a drainer, or being
	// drained (its slice may then be empty while the last event is sent).
	keyq  map[LaneKey][]laneJob
	ready []LaneKey // scheduled keys without a drainer yet, in order
	wake  chan struct{}
	// jobs counts the events in keyq and being sent; at Options.LaneMaxQueued
	// the partition worker waits (room) before its next batch.
	jobs int
	room chan struct{}

	p *partition
}

func newLaneRouter(p *partition) *laneRouter {
	return &laneRouter{
		p:         p,
		blocked:   map[LaneKey]struct{}{},
		queued:    map[LaneKey]int{},
		lastRun:   map[LaneKey]string{},
		head:      map[LaneKey]string{},
		recheck:   map[LaneKey]recheck{},
		recovered: map[LaneKey]string{},
		parked:    map[LaneKey]string{},
		headFP:    map[LaneKey]string{},
		keyq:      map[LaneKey][]laneJob{},
		wake:      make(chan struct{}, 1),
		room:      make(chan struct{}, 1),
	}
}

// open loads the partition's blocked keys (no event of a blocked key may
// apply inline) and starts the lane sender.
func (r *laneRouter) open() bool {
	if !r.loadBlocked() || !r.loadParked() {
		return false
	}
	r.p.wg.Add(1)
	go r.runSender()
	return true
}

// route holds the batch until the sender has room, then applies it with
// the hold rules (inline mode) or hands every pair off through the lanes
// (workflow mode).
func (r *laneRouter) route(seg *segment, items []item, last *kgo.Record) bool {
	if !r.waitRoom() {
		return false
	}
	if r.p.b.opts.Mode == config.ModeWorkflow {
		return r.handOffOrdered(seg, items)
	}
	return r.applyOrdered(seg, items, last)
}

// close drops the partition's blocked keys from the gauge when it stops.
func (r *laneRouter) close() {
	r.mu.Lock()
	r.p.b.m.blockedKeys.Sub(float64(len(r.blocked)))
	r.blocked = map[LaneKey]struct{}{}
	r.mu.Unlock()
}

// waitRoom holds the partition worker while its sender holds LaneMaxQueued
// events or more (full lanes): backpressure, never a drop. False when the
// partition stopped first.
func (r *laneRouter) waitRoom() bool {
	p := r.p
	o := r
	for {
		o.mu.Lock()
		n := o.jobs
		o.mu.Unlock()
		if n < p.b.opts.LaneMaxQueued {
			return true
		}
		p.log.Debug("lanes full: partition held", "queuedForLanes", n)
		select {
		case <-o.room:
		case <-p.ctx.Done():
			return false
		}
	}
}

// jobDoneLocked counts one event of the sender as sent; the caller holds o.mu.
func (o *laneRouter) jobDoneLocked() {
	o.jobs--
	select {
	case o.room <- struct{}{}:
	default:
	}
}

func keyOf(projection string, ev *event.Envelope) LaneKey {
	return LaneKey{Projection: projection, ForkID: ev.ForkID, EntityID: ev.EntityID}
}

func (k LaneKey) laneID() string { return contract.LaneWorkflowID(k.Projection, k.ForkID, k.EntityID) }

// unqueueLocked drops one event (or reservation) of k.
func (o *laneRouter) unqueueLocked(k LaneKey) {
	if n := o.queued[k] - 1; n > 0 {
		o.queued[k] = n
	} else {
		delete(o.queued, k)
	}
}

// loadBlocked reads the partition's blocked keys, retrying while the
// database is unreachable; the sweeper checks their lanes. False when
// stopped.
func (r *laneRouter) loadBlocked() bool {
	p := r.p
	var keys []BlockedKey
	if !p.until(p.log, "database", "cannot load blocked keys", func(ctx context.Context) (err error) {
		keys, err = p.b.opts.Blocks.Load(ctx, p.topic, p.id)
		return err
	}) {
		return false
	}
	r.mu.Lock()
	for _, bk := range keys {
		k := bk.LaneKey
		if _, ok := r.blocked[k]; !ok {
			r.blocked[k] = struct{}{}
			p.b.m.blockedKeys.Inc()
		}
		r.lastRun[k] = ""
		if bk.Head != "" {
			r.head[k] = bk.Head
		}
	}
	r.mu.Unlock()
	if len(keys) > 0 {
		p.log.Info("blocked keys loaded", "blockedKeys", len(keys))
	}
	return true
}

// errRerun rolls a batch back so it runs again with more pairs held.
var errRerun = errors.New("rerun: a later event of a failed key was applied")

const maxOrderedRuns = 5

// applyOrdered is applyInline with CAUSET_ORDERING=entity: pairs of blocked
// keys are held, a failure blocks its key (recorded in the batch's
// transaction) and holds the key's later pairs of the batch, and the failed
// and held pairs go to the lane sender in order.
func (r *laneRouter) applyOrdered(seg *segment, items []item, last *kgo.Record) bool {
	p := r.p
	b, o := p.b, r
	evs := make([]event.Envelope, len(items))
	for i, it := range items {
		evs[i] = it.env
	}
	// The keys blocked now are held for the whole batch; a reservation per
	// key keeps the sender from unblocking one before its held events are
	// queued.
	var snap map[LaneKey]struct{}
	var parkSnap parkSnapshot // policy hold: what the blocked keys park
	o.mu.Lock()
	if len(o.blocked) > 0 {
		for _, it := range items {
			for _, proj := range it.projections {
				k := keyOf(proj, &it.env)
				if _, ok := o.blocked[k]; ok {
					if snap == nil {
						snap = map[LaneKey]struct{}{}
					}
					if _, ok := snap[k]; !ok {
						snap[k] = struct{}{}
						o.queued[k]++
						parkSnap.add(o, k)
					}
				}
			}
		}
	}
	o.mu.Unlock()
	defer func() {
		if len(snap) == 0 {
			return
		}
		o.mu.Lock()
		for k := range snap {
			o.unqueueLocked(k)
		}
		o.mu.Unlock()
	}()

	// extra holds, for a key that failed in an earlier run of this batch,
	// every pair after its first failure (index > extra[k]).
	extra := map[LaneKey]int{}
	var index map[*event.Envelope]int
	hold := func(proj string, ev *event.Envelope) bool {
		k := keyOf(proj, ev)
		if _, ok := snap[k]; ok {
			return true
		}
		if len(extra) == 0 {
			return false
		}
		at, ok := extra[k]
		if !ok {
			return false
		}
		if index == nil {
			index = make(map[*event.Envelope]int, len(evs))
			for i := range evs {
				index[&evs[i]] = i
			}
		}
		return index[ev] > at
	}
	var (
		newBlocked []BlockedKey
		park       parking
		startedAt  time.Time
	)
	beforeCommit := func(ctx context.Context, tx pgx.Tx, outs []projection.Result) error {
		first := map[LaneKey]int{}
		for _, o := range outs {
			if o.Status == projection.StatusFailed {
				k := keyOf(o.Projection, &evs[o.Index])
				if at, ok := first[k]; !ok || o.Index < at {
					first[k] = o.Index
				}
			}
		}
		rerun := false
		for _, o := range outs {
			if o.Status != projection.StatusApplied && o.Status != projection.StatusDuplicate {
				continue
			}
			k := keyOf(o.Projection, &evs[o.Index])
			if at, ok := first[k]; ok && o.Index > at {
				if cur, ok := extra[k]; !ok || at < cur {
					extra[k] = at
				}
				rerun = true
			}
		}
		if rerun {
			return errRerun
		}
		parkSnap.blocked = snap
		if err := park.decide(ctx, tx, p, items, evs, outs, first, parkSnap, startedAt); err != nil {
			return err
		}
		newBlocked = newBlocked[:0]
		seen := map[LaneKey]bool{}
		for _, o := range outs {
			if o.Status != projection.StatusFailed && o.Status != projection.StatusHeld {
				continue
			}
			k := keyOf(o.Projection, &evs[o.Index])
			if _, ok := snap[k]; ok || seen[k] {
				continue
			}
			seen[k] = true
			bk := BlockedKey{LaneKey: k}
			if id := park.heads[k]; id != "" {
				// Parked behind its incident: the key's later events are parked too.
				bk.Head = id
			} else if at, ok := first[k]; ok {
				// The key's first failure is handed off as a plain retry
				// workflow, its head; its later events go to the lane.
				bk.Head = contract.RetryWorkflowID(k.Projection, evs[at].ForkID, evs[at].EventID)
			}
			newBlocked = append(newBlocked, bk)
		}
		return b.opts.Blocks.Add(ctx, tx, p.topic, p.id, newBlocked)
	}

	var runs int
	outcomes, res := p.applyThroughOutage(items, last, func() ([]projection.Result, error) {
		// Attempt 1 starts with this try's first run: a try after an outage
		// starts it afresh, so the schedule counts from the attempt that ran.
		startedAt = time.Now().UTC()
		for {
			outcomes, err := p.b.opts.Engine.ApplyBatch(p.ctx, evs, projection.ApplyOptions{Hold: hold, BeforeCommit: beforeCommit})
			if !errors.Is(err, errRerun) || p.ctx.Err() != nil {
				return outcomes, err
			}
			runs++
			if runs >= maxOrderedRuns-1 {
				// Not stable: hold every pair of each failed key after the
				// first pair of the batch.
				for k := range extra {
					extra[k] = -1
				}
			}
			p.log.Debug("failed key had later events applied in the same batch: batch rerun with them held",
				"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "run", runs+1)
		}
	})
	switch res.verdict {
	case verdictStopped:
		return false
	case verdictIsolate:
		return p.isolate(seg, items, res.err, r.applyOrdered)
	}

	heads := make(map[LaneKey]string, len(newBlocked))
	for _, bk := range newBlocked {
		if bk.Head != "" {
			heads[bk.LaneKey] = bk.Head
		}
	}
	var jobs []laneJob
	for _, oc := range p.countOutcomes(items, outcomes) {
		it := items[oc.Index]
		k := keyOf(oc.Projection, &it.env)
		if park.pairs[pairOf(oc)] {
			continue
		}
		if oc.Status == projection.StatusFailed {
			p.noteFailure(oc, &it.env)
			head := heads[k] != "" && heads[k] == contract.RetryWorkflowID(oc.Projection, it.env.ForkID, it.env.EventID)
			jobs = append(jobs, laneJob{seg: seg, rec: it.rec, in: p.retryInput(it, oc.Projection, firstAttempt(oc, startedAt)), key: k, head: head})
			continue
		}
		in := p.retryInput(it, oc.Projection, nil)
		in.Mode = config.ModeWorkflow // its attempt 1 runs in its retry workflow
		jobs = append(jobs, laneJob{seg: seg, rec: it.rec, in: in, key: k})
	}
	park.committed(r)
	r.enqueue(newBlocked, jobs)
	return true
}

// enqueue records the newly blocked keys and queues jobs for the sender, in
// order; each job counts in its segment until it was handed off.
func (r *laneRouter) enqueue(newBlocked []BlockedKey, jobs []laneJob) {
	if len(jobs) == 0 && len(newBlocked) == 0 {
		return
	}
	p := r.p
	r.mu.Lock()
	for _, bk := range newBlocked {
		if _, ok := r.blocked[bk.LaneKey]; !ok {
			r.blocked[bk.LaneKey] = struct{}{}
			p.b.m.blockedKeys.Inc()
		}
		if bk.Head != "" {
			r.head[bk.LaneKey] = bk.Head
		}
	}
	for _, j := range jobs {
		j.seg.pending.Add(1)
		r.jobs++
		r.queued[j.key]++
		q, scheduled := r.keyq[j.key]
		if !scheduled {
			r.ready = append(r.ready, j.key)
		}
		r.keyq[j.key] = append(q, j)
	}
	r.mu.Unlock()
	for _, bk := range newBlocked {
		if isIncidentHead(bk.Head) {
			p.log.Info("key held by its incident: its later events are parked behind it", "event", "projection_key_blocked",
				"projectionName", bk.Projection, "forkId", bk.ForkID, "entityId", bk.EntityID, "incidentId", bk.Head)
			continue
		}
		p.log.Info("key blocked: its later events wait in its lane", "event", "projection_key_blocked",
			"projectionName", bk.Projection, "forkId", bk.ForkID, "entityId", bk.EntityID, "laneId", bk.laneID(),
			"headWorkflowId", bk.Head)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// handOffOrdered is workflow mode with CAUSET_ORDERING=entity. Every matched
// pair runs attempt 1 in its own retry workflow, so a key is blocked while
// any of its pairs is in Temporal: a pair of a key that is not blocked
// blocks it and starts as its head; a later pair of a blocked key goes to
// the key's lane, which runs it once the head (and every earlier pair) has
// settled. The sweeper unblocks the key once its head has settled and its
// lane has closed, as in inline mode.
func (r *laneRouter) handOffOrdered(seg *segment, items []item) bool {
	p := r.p
	if !p.refreshCatalog() {
		return false
	}
	var (
		newBlocked []BlockedKey
		heads      = map[LaneKey]bool{} // keys this batch blocks
		jobs       []laneJob
		reserved   []LaneKey
	)
	r.mu.Lock()
	for _, it := range items {
		projs := p.b.opts.Engine.Projections(it.env.EventType)
		if len(projs) == 0 {
			p.b.m.skipped.Inc()
		}
		for _, proj := range projs {
			k := keyOf(proj, &it.env)
			j := laneJob{seg: seg, rec: it.rec, in: p.retryInput(it, proj, nil), key: k}
			if _, ok := r.blocked[k]; !ok && !heads[k] {
				j.head = true
				heads[k] = true
				newBlocked = append(newBlocked, BlockedKey{LaneKey: k, Head: j.in.WorkflowID()})
			} else if ok {
				// Reserved until queued: the sweeper must not unblock the
				// key before this pair is in the sender's queue.
				r.queued[k]++
				reserved = append(reserved, k)
			}
			jobs = append(jobs, j)
		}
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, k := range reserved {
			r.unqueueLocked(k)
		}
		r.mu.Unlock()
	}()
	// The blocks are durable before any pair of theirs is handed off, so a
	// bridge that takes the partition over holds the keys too.
	if len(newBlocked) > 0 && !p.until(p.log, "database", "cannot record blocked keys", func(ctx context.Context) error {
		return p.b.opts.Blocks.Add(ctx, nil, p.topic, p.id, newBlocked)
	}) {
		return false
	}
	r.enqueue(newBlocked, jobs)
	return true
}
