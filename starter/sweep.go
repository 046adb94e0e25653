package starter

import (
	"context"
	"errors"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/contract"
)

// The sweeper unblocks keys whose head has settled and whose lane has
// closed (CAUSET_ORDERING=entity).
//
// One goroutine per bridge, instead of one long-poll per lane: every
// sweepInterval it lists, in every owned partition, the blocked keys that
// the sender holds no event of (queued == 0), and checks their lanes with
// DescribeWorkflowExecution, at most sweepConcurrency at a time and
// sweepRate per second. Cost is bounded whatever the number of blocked keys;
// a key is unblocked between sweepInterval and maxRecheck (plus the sweep)
// after its head settled and its lane closed. Until then its events keep
// going to its lane, which is always correct.
//
// A key whose head (the retry workflow of the failure that blocked it) has
// not settled stays blocked whatever its lane: the head is checked first,
// and it is kept with the block in PostgreSQL, so a bridge that starts
// afresh checks it too. Once the head has settled it never holds the key
// again (its replay later does not block the key, as a lane's dead-lettered
// child does not), and every lane event waited for it.
//
// Correctness (the argument of the per-lane watcher it replaces): for a key
// k, the sweeper notes R = lastRun[k] (the lane run that last accepted an
// event of k) under ord.mu, then describes the latest run of k's lane ID.
// If that run is closed, R and any run it continued as new are closed too
// (a workflow ID has at most one open run and R started before the
// describe), so every event R accepted has run (the lane completes only
// with an empty queue and no handler in flight). Then, under ord.mu again,
// k is unblocked only if it is still blocked, lastRun[k] is still R and the
// sender holds no event of k: an event accepted after the snapshot was
// accepted by R (so it has run) or by a newer run (lastRun changed: no
// unblock), and an event on its way counts in queued. Nothing of k can then
// be applied inline before an earlier event of k has run.
//
// A key is first checked once its head could have settled (its attempt 2
// is due). A key found still blocked is checked again after a delay that
// doubles from sweepInterval up to maxRecheck, and is checked at the next
// sweep again when its lane accepts an event: thousands of keys whose
// heads retry for long cost the server a trickle of describes, at the
// price of unblocking such a key up to maxRecheck late.
const (
	maxRecheck       = 16 * time.Second
	sweepInterval    = 2 * time.Second
	sweepConcurrency = 8
	sweepRate        = 50 // key checks per second, at most: a describe costs the server about half a workflow start
)

// runSweeper checks the lanes of idle blocked keys until the bridge stops.
func (b *Bridge) runSweeper() {
	defer b.wg.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		b.sweep()
	}
}

type sweepCandidate struct {
	r    *laneRouter
	k    LaneKey
	run  string
	head string
}

// sweep checks, once, the lane of every blocked key that the sender holds
// no event of.
func (b *Bridge) sweep() {
	var cands []sweepCandidate
	for _, p := range b.owned() {
		o, ok := p.router.(*laneRouter)
		if !ok {
			continue
		}
		now := time.Now()
		o.mu.Lock()
		for k := range o.blocked {
			// Keys parked behind an incident are released by the incident's
			// state (settleParked), not by a workflow the sweeper describes.
			if o.queued[k] == 0 && !now.Before(o.recheck[k].at) && !isIncidentHead(o.head[k]) {
				cands = append(cands, sweepCandidate{o, k, o.lastRun[k], o.head[k]})
			}
		}
		o.mu.Unlock()
	}
	if len(cands) == 0 {
		return
	}
	slots := make(chan struct{}, sweepConcurrency)
	pace := time.NewTicker(time.Second / sweepRate)
	defer pace.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, c := range cands {
		select {
		case <-b.ctx.Done():
			return
		case <-pace.C:
		}
		select {
		case <-b.ctx.Done():
			return
		case slots <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			c.r.checkLane(c.k, c.run, c.head)
		}()
	}
}

// checkLane unblocks k if its head (the retry workflow of the failure that
// blocked it, if the bridge started one) has settled and its lane is
// closed and, meanwhile, no event of k was queued or accepted by another
// run than run.
func (r *laneRouter) checkLane(k LaneKey, run, head string) {
	p := r.p
	if !p.hold() {
		return
	}
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	// A lane this bridge sent events to is looked at first, so that a lost
	// one is noticed while the head still retries; otherwise the head first,
	// which saves a describe per check of a key without a lane.
	laneFirst := run != ""
	if laneFirst && !r.laneDone(ctx, k, run) {
		return
	}
	if head != "" {
		settled, err := r.headSettled(ctx, head)
		if err != nil {
			if p.ctx.Err() == nil {
				p.log.Debug("cannot check the key's head, next sweep retries", "headWorkflowId", head, "error", err.Error())
			}
			return
		}
		if !settled {
			r.later(k)
			return
		}
	}
	if !laneFirst && !r.laneDone(ctx, k, run) {
		return
	}
	o := r
	o.mu.Lock()
	if _, ok := o.blocked[k]; !ok || o.queued[k] > 0 || o.lastRun[k] != run || o.head[k] != head || p.ctx.Err() != nil {
		o.mu.Unlock()
		return
	}
	if _, parked := o.parked[k]; parked {
		o.mu.Unlock()
		// Its head settled: the key's parked events are next, in order.
		for r.drainParked([]LaneKey{k}) && p.ctx.Err() == nil {
		}
		return
	}
	defer o.mu.Unlock()
	if err := p.b.opts.Blocks.Remove(p.ctx, nil, p.topic, p.id, k); err != nil {
		// Stays blocked: the next sweep retries, or its next event goes to a new lane run.
		p.log.Warn("cannot clear a blocked key after its lane closed", "laneId", k.laneID(), "error", err.Error())
		return
	}
	o.forgetLocked(k)
	p.b.m.blockedKeys.Dec()
	p.b.m.unblocked.WithLabelValues("lane_closed").Inc()
	p.log.Info("lane closed: key unblocked", "event", "projection_key_unblocked",
		"projectionName", k.Projection, "forkId", k.ForkID, "entityId", k.EntityID, "laneId", k.laneID())
}

// laneDone reports whether k's lane lets the key go: closed and completed,
// or lost and already recovered. A lost lane not yet recovered is recovered
// here (recoverLane); an open one is looked at again later.
func (r *laneRouter) laneDone(ctx context.Context, k LaneKey, run string) bool {
	p := r.p
	lane, err := r.laneState(ctx, k)
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Debug("cannot check lane, next sweep retries", "laneId", k.laneID(), "error", err.Error())
		}
		return false
	}
	switch {
	case lane.open:
		r.later(k)
		return false
	case lane.lost && !r.wasRecovered(k, lane.runID):
		r.recoverLane(ctx, k, run, lane)
		return false
	}
	return true
}

// recheck is when the sweeper looks at a blocked key again.
type recheck struct {
	at    time.Time
	every time.Duration
}

// later puts off the next check of k, which was found still blocked.
func (o *laneRouter) later(k LaneKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.blocked[k]; !ok {
		return
	}
	r := o.recheck[k]
	r.every = min(max(2*r.every, sweepInterval), maxRecheck)
	r.at = time.Now().Add(r.every)
	o.recheck[k] = r
}

// forgetLocked drops an unblocked key's state; the caller holds o.mu.
func (o *laneRouter) forgetLocked(k LaneKey) {
	delete(o.blocked, k)
	delete(o.lastRun, k)
	delete(o.head, k)
	delete(o.recheck, k)
	delete(o.recovered, k)
	delete(o.parked, k)
	delete(o.headFP, k)
}

// laneRun is what the sweeper knows of the latest run of a key's lane.
type laneRun struct {
	open   bool   // running (or in a state this code does not know)
	lost   bool   // closed without completing: failed, terminated, timed out, canceled
	runID  string // the run described
	status enumspb.WorkflowExecutionStatus
}

// laneState describes the latest run of k's lane; a lane that does not
// exist is closed.
func (r *laneRouter) laneState(ctx context.Context, k LaneKey) (laneRun, error) {
	p := r.p
	resp, err := p.b.opts.Lanes.DescribeWorkflowExecution(ctx, k.laneID(), "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return laneRun{}, nil
		}
		return laneRun{}, err
	}
	info := resp.GetWorkflowExecutionInfo()
	lane := laneRun{runID: info.GetExecution().GetRunId(), status: info.GetStatus()}
	switch lane.status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
		enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		lane.lost = true
	default:
		lane.open = true
	}
	return lane, nil
}

// headSettled reports whether the retry workflow head has settled
// (contract.Settled; with HoldEntity, contract.Final) or does not exist.
func (r *laneRouter) headSettled(ctx context.Context, head string) (bool, error) {
	p := r.p
	if p.b.opts.HoldEntity {
		return contract.RetryFinal(ctx, p.b.opts.Lanes, head)
	}
	return contract.RetrySettled(ctx, p.b.opts.Lanes, head)
}

// hold counts a sweeper check in the partition's wait group unless the
// partition is stopping, so that stop waits for it.
func (p *partition) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping || p.ctx.Err() != nil {
		return false
	}
	p.wg.Add(1)
	return true
}
