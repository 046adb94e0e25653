package starter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/backoff"
	"github.com/causet/projection-retry/projection"
)

// laneFullMaxWait caps the wait between tries of an event whose lane is full.
const laneFullMaxWait = 2 * time.Second

// runSender starts a drainer for each scheduled key, in order, once a slot
// of MaxInflight is free: keys are sent concurrently, each key's events one
// at a time.
func (r *laneRouter) runSender() {
	p := r.p
	defer p.wg.Done()
	b, o := p.b, r
	for {
		o.mu.Lock()
		var k LaneKey
		ok := len(o.ready) > 0
		if ok {
			k = o.ready[0]
			o.ready[0] = LaneKey{}
			o.ready = o.ready[1:]
		}
		o.mu.Unlock()
		if !ok {
			select {
			case <-p.ctx.Done():
				return
			case <-o.wake:
			}
			continue
		}
		select {
		case b.sem <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
		b.m.inflight.Inc()
		p.wg.Add(1)
		go r.drainKey(k)
	}
}

// drainKey hands k's queued events to its lane one at a time, in partition
// order, until k's FIFO is empty; it holds one MaxInflight slot meanwhile.
// An event stays pending in its segment until sendToLane returns true.
func (r *laneRouter) drainKey(k LaneKey) {
	p := r.p
	b, o := p.b, r
	defer func() {
		<-b.sem
		b.m.inflight.Dec()
		p.wg.Done()
	}()
	for {
		o.mu.Lock()
		q := o.keyq[k]
		if len(q) == 0 {
			delete(o.keyq, k) // unscheduled: the next event of k schedules it again
			o.mu.Unlock()
			return
		}
		j := q[0]
		q[0] = laneJob{}
		o.keyq[k] = q[1:]
		if !j.head {
			j.in.WaitFor = o.head[k]
		}
		o.mu.Unlock()
		send := r.sendToLane
		if j.head {
			send = r.startHead
		}
		if !send(j) {
			return // stopped: the event is not committed
		}
		o.mu.Lock()
		o.jobDoneLocked()
		o.mu.Unlock()
		j.seg.pending.Add(-1)
	}
}

// startHead hands off the failure that blocked its key as a plain retry
// workflow, as handOff does for a failure without ordering, retrying with
// capped backoff while Temporal is unavailable: one workflow start, instead
// of a lane start, an update and a child, for the common case of a failing
// key with no later event. The key's later events go to its lane, which
// runs them once this workflow has settled (RetryInput.WaitFor). False when
// the partition was stopped first.
func (r *laneRouter) startHead(j laneJob) bool {
	p := r.p
	b, o := p.b, r
	log := p.eventLog(j.rec, j.in)
	outage, end := p.startUntilDurable(log, j.rec, j.in)
	switch end {
	case handoffStopped:
		return false
	case handoffDeadLettered:
		// No head workflow exists, so the sweeper finds the head settled.
		o.mu.Lock()
		o.unqueueLocked(j.key)
		o.mu.Unlock()
		return true
	}
	// The head cannot settle before its attempt 2: no sweeper check of the
	// key until then.
	first, _ := j.in.Retry.Plan(j.in.Mode).NextDelay(1)
	o.mu.Lock()
	o.unqueueLocked(j.key)
	if _, ok := o.blocked[j.key]; ok {
		o.recheck[j.key] = recheck{at: time.Now().Add(first)}
	}
	o.mu.Unlock()
	b.m.laneHandoffs.WithLabelValues("head").Inc()
	b.m.handedOff.WithLabelValues(string(j.in.Mode)).Inc()
	logHandOff(log, j.in, outage)
	return true
}

// laneStartOptions start a key's lane: an open run takes the event; a
// closed one is followed by a new run.
func laneStartOptions(taskQueue string, k LaneKey) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       k.laneID(),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes:    contract.LaneSearchAttributes(k.Projection, k.ForkID, k.EntityID),
	}
}

// enqueueLane adds in to its key's lane. It returns the lane run that
// accepted it, or refused with the run that refused it.
func (r *laneRouter) enqueueLane(ctx context.Context, k LaneKey, in contract.RetryInput) (runID string, refused bool, err error) {
	p := r.p
	lc := p.b.opts.Lanes
	op := lc.NewWithStartWorkflowOperation(laneStartOptions(p.b.opts.TaskQueue, k), contract.LaneWorkflowName,
		contract.LaneInput{Projection: k.Projection, ForkID: k.ForkID, EntityID: k.EntityID,
			MaxQueued: p.b.opts.LaneMaxQueued, MaxQueuedBytes: p.b.opts.LaneMaxQueuedBytes, HoldEntity: p.b.opts.HoldEntity})
	h, err := lc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   contract.UpdateEnqueue,
			Args:         []any{in},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		var n int
		err = h.Get(ctx, &n)
		runID = h.RunID()
	}
	if runID == "" {
		if run, rerr := op.Get(ctx); rerr == nil && run != nil {
			runID = run.GetRunID()
		}
	}
	if err != nil && isLaneClosing(err) {
		return runID, true, nil
	}
	return runID, false, err
}

// diagnoseLaneTimeout says why a lane took no event in time when the
// reason is the lane's own: an open run on a task queue other than this
// bridge's (a lane left by a deployment with another CAUSET_TASK_QUEUE) is
// the run every enqueue joins, and no worker of this deployment will run
// it. The events wait, as in any outage, until a worker polls that queue:
// the lane then runs what it holds, and takes or refuses the event.
func (r *laneRouter) diagnoseLaneTimeout(log *slog.Logger, k LaneKey) {
	p := r.p
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	d, err := p.b.opts.Lanes.DescribeWorkflowExecution(ctx, k.laneID(), "")
	if err != nil {
		return // the outage line says what failed
	}
	info := d.GetWorkflowExecutionInfo()
	queue := d.GetExecutionConfig().GetTaskQueue().GetName()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || queue == "" || queue == p.b.opts.TaskQueue {
		return
	}
	log.Warn("the key's lane runs on another task queue, which this deployment's workers do not poll: its events wait until a worker polls that queue",
		"event", "bridge_lane_on_other_queue", "laneRunId", info.GetExecution().GetRunId(),
		"laneTaskQueue", queue, "taskQueue", p.b.opts.TaskQueue)
}

// isLaneFull reports the enqueue validator's refusal of a lane at its bound.
func isLaneFull(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == contract.LaneFullErrorType
}

// isLaneClosing reports the enqueue validator's refusal of a lane that
// runs no more events.
func isLaneClosing(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == contract.LaneClosingErrorType
}

// sendToLane hands one event to its lane, retrying with capped backoff while
// Temporal is unavailable. On a refusal it waits for the refusing run to
// complete, then either applies the event inline and unblocks the key (no
// other event of the key is queued) or sends it to a new lane run. False
// when the partition was stopped first (the event is then not committed).
func (r *laneRouter) sendToLane(j laneJob) bool {
	p := r.p
	b, o := p.b, r
	log := p.eventLog(j.rec, j.in).With("laneId", j.key.laneID())
	span := startHandoffSpan(j.rec, j.in) // the lane's update continues the record's trace
	defer span.End()
	j.in.TraceContext = traceContextOf(span)
	rt := p.retrier(log, p.temporal())
	full := backoff.Backoff{Min: b.opts.MinBackoff, Max: laneFullMaxWait}
	diagnosed := false
	for {
		ctx, cancel := context.WithTimeout(p.ctx, b.opts.StartTimeout)
		runID, refused, err := r.enqueueLane(withSpan(ctx, span), j.key, j.in)
		cancel()
		if err != nil {
			if p.ctx.Err() != nil {
				return false
			}
			if isTimeout(err) && !diagnosed {
				diagnosed = true
				r.diagnoseLaneTimeout(log, j.key)
			}
			if isLaneFull(err) {
				// Backpressure from a live lane: it drains once its head settles.
				b.m.laneFull.Inc()
				log.Debug("lane is full: the event waits in the bridge", "error", err.Error())
				if full.Wait(p.ctx) != nil {
					return false
				}
				continue
			}
			if rt.refuses("cannot add event to its lane: offsets stop here, retrying with backoff", err) {
				if !p.deadLetterRefused(log, j.in, err) {
					return false
				}
				o.mu.Lock()
				o.unqueueLocked(j.key)
				o.mu.Unlock()
				return true
			}
			b.m.handoffRetry.Inc()
			if !rt.wait() {
				return false
			}
			continue
		}
		if !refused {
			o.mu.Lock()
			o.unqueueLocked(j.key)
			o.lastRun[j.key] = runID
			delete(o.recheck, j.key) // its lane may close soon: check it at the next sweep
			o.mu.Unlock()
			role := "held"
			if j.in.FirstAttempt != nil {
				role = "head"
			}
			b.m.laneHandoffs.WithLabelValues(role).Inc()
			b.m.handedOff.WithLabelValues(string(j.in.Mode)).Inc()
			logHandOff(log.With("laneRunId", runID), j.in, rt.outage)
			return true
		}

		b.m.laneRefused.Inc()
		log.Debug("lane is closing: waiting for it to complete", "laneRunId", runID)
		if !r.waitLaneClosed(j.key, runID) {
			return false
		}
		o.mu.Lock()
		if o.queued[j.key] > 1 || b.opts.Mode == config.ModeWorkflow {
			// Later events of the key are queued (or, in workflow mode,
			// attempt 1 belongs to a workflow): the key stays blocked and
			// this event starts the lane's next run.
			o.mu.Unlock()
			continue
		}
		done, failed, err := r.applyUnblocking(j)
		if err != nil {
			o.mu.Unlock()
			log.Warn("cannot apply the event inline after its lane closed, retrying with backoff",
				"dependency", "database", "error", err.Error())
			if !rt.wait() {
				return false
			}
			continue
		}
		if done {
			o.unqueueLocked(j.key)
			if _, ok := o.blocked[j.key]; ok {
				b.m.blockedKeys.Dec()
			}
			o.forgetLocked(j.key)
			o.mu.Unlock()
			b.m.unblocked.WithLabelValues("refusal").Inc()
			log.Info("lane closed: key unblocked, event applied inline", "event", "projection_key_unblocked")
			return true
		}
		o.mu.Unlock()
		// Attempt 1 failed: the key stays blocked and this event heads the
		// lane's next run.
		b.m.failed.WithLabelValues(failed.ErrorKind).Inc()
		j.in.Mode = config.ModeInline
		j.in.FirstAttempt = failed
	}
}

// applyUnblocking applies j's pair inline in a transaction that clears the
// key's block; the caller holds ord.mu. done: applied (or nothing to do);
// failed: attempt 1 failed (the block stays); err: an outage.
func (r *laneRouter) applyUnblocking(j laneJob) (done bool, failed *contract.Attempt, err error) {
	p := r.p
	b := p.b
	evs := []event.Envelope{j.in.Event}
	removed := false
	started := time.Now().UTC()
	outs, err := b.opts.Engine.ApplyBatch(p.ctx, evs, projection.ApplyOptions{
		Hold: func(proj string, _ *event.Envelope) bool { return proj != j.in.Projection },
		BeforeCommit: func(ctx context.Context, tx pgx.Tx, outs []projection.Result) error {
			for _, oc := range outs {
				if oc.Projection == j.in.Projection && oc.Status == projection.StatusFailed {
					return nil
				}
			}
			removed = true
			return b.opts.Blocks.Remove(ctx, tx, p.topic, p.id, j.key)
		},
	})
	if isOutage(outs, err) {
		if err == nil {
			err = firstConnectionError(outs)
		}
		return false, nil, err
	}
	for _, oc := range outs {
		if oc.Projection != j.in.Projection {
			continue
		}
		switch oc.Status {
		case projection.StatusApplied, projection.StatusDuplicate:
			b.m.applied.WithLabelValues(string(oc.Status)).Inc()
		case projection.StatusFailed:
			return false, &contract.Attempt{Number: 1, StartedAt: started, ErrorKind: kindOf(oc), Error: errString(errOf(oc)), IRVersion: oc.IRVersion}, nil
		}
	}
	if !removed { // the projection no longer lists the event: nothing ran the hook
		if err := b.opts.Blocks.Remove(p.ctx, nil, p.topic, p.id, j.key); err != nil {
			return false, nil, err
		}
	}
	return true, nil, nil
}

// waitLaneClosed waits until the lane run has completed (or is gone).
func (r *laneRouter) waitLaneClosed(k LaneKey, runID string) bool {
	p := r.p
	return p.until(p.log.With("laneId", k.laneID()), "temporal", "cannot wait for the lane to complete", func(ctx context.Context) error {
		err := p.b.opts.Lanes.GetWorkflow(ctx, k.laneID(), runID).Get(ctx, nil)
		if laneGone(err) {
			return nil
		}
		return err
	})
}

// laneGone reports whether Get failed because the run is closed without a
// result (failed, terminated, timed out, canceled) or does not exist.
func laneGone(err error) bool {
	var nf *serviceerror.NotFound
	var we *temporal.WorkflowExecutionError
	return errors.As(err, &nf) || errors.As(err, &we)
}
