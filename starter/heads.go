package starter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/parking"
)

// The head watcher (CAUSET_ORDERING=entity): one goroutine per bridge that
// finds the blocked keys whose head has moved on and wakes their
// partitions, which release them (release.go).
//
// Where a head stands is recorded in its key's row by whoever moves it:
// the worker as a retry workflow succeeds (in the apply transaction),
// dead-letters (before the record), is discarded or its window ends; the
// incident workflow as it stops holding; the bridge as a head's own event
// applies on redelivery. The watcher reads those rows every headPoll, one
// indexed query for all owned partitions, and asks Temporal nothing: a key
// is released within headPoll of its head settling.
//
// A head whose settling is never recorded — a retry workflow terminated by
// an operator, one of an earlier release, an incident whose row is gone —
// would hold its key for good. So a retry head still active after its
// schedule could have run (staleAfter) is described, at most
// describeConcurrency at a time and describeRate per second, again after a
// delay that doubles up to maxDescribeEvery while it is still active, and
// the state it is found in is recorded as the worker would have.
const (
	headPoll            = 100 * time.Millisecond
	staleCheckEvery     = 2 * time.Second
	oldestEvery         = 10 * time.Second
	minDescribeEvery    = 5 * time.Second
	maxDescribeEvery    = 2 * time.Minute
	describeConcurrency = 8
	describeRate        = 50 // describes per second at most: each costs the server about half a workflow start
)

// headWatcher is a bridge's head watcher.
type headWatcher struct {
	ctx  context.Context
	opts *Options
	log  *slog.Logger
	m    *metrics
	// partitions returns the owned partitions' ordering routers.
	partitions func() map[int32]*orderedRouter
}

// run watches the heads of the owned partitions' keys until ctx ends.
func (w *headWatcher) run() {
	t := time.NewTicker(headPoll)
	defer t.Stop()
	var lastStale, lastOldest time.Time
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		parts := w.partitions()
		if len(parts) == 0 {
			continue
		}
		w.pollHeads(parts)
		if time.Since(lastStale) >= staleCheckEvery {
			lastStale = time.Now()
			w.checkStaleHeads(parts)
		}
		if time.Since(lastOldest) >= oldestEvery {
			lastOldest = time.Now()
			w.measureOldest(parts)
		}
	}
}

// movedStates are the head states the watcher looks for.
func (w *headWatcher) movedStates() []parking.HeadState {
	states := []parking.HeadState{parking.HeadSettled, parking.HeadDeadLetterAll}
	if !w.opts.HoldEntity {
		states = append(states, parking.HeadDeadLettered)
	}
	return states
}

// pollHeads reads the keys whose head has moved on and hands them to their
// partitions.
func (w *headWatcher) pollHeads(parts map[int32]*orderedRouter) {
	ids := make([]int32, 0, len(parts))
	for id := range parts {
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.StartTimeout)
	defer cancel()
	moved, err := w.opts.Parking.Moved(ctx, w.opts.Topic, ids, w.movedStates())
	if err != nil {
		if w.ctx.Err() == nil {
			w.log.Debug("cannot read settled heads, next poll retries", "error", err.Error())
		}
		return
	}
	for id, r := range parts {
		r.moved(moved[id])
	}
}

// staleHead is a head the watcher describes.
type staleHead struct {
	r    *orderedRouter
	key  parking.Key
	head string
}

// checkStaleHeads describes the retry heads active past staleAfter whose
// next look is due, and records the state they are found in.
func (w *headWatcher) checkStaleHeads(parts map[int32]*orderedRouter) {
	now := time.Now()
	staleAfter := w.staleAfter()
	var stale []staleHead
	var incidents []string
	for _, r := range parts {
		r.mu.Lock()
		for k, bk := range r.keys {
			if parking.IsIncident(bk.head) {
				if bk.state == parking.HeadActive {
					incidents = append(incidents, bk.head)
				}
				continue
			}
			active := bk.state == parking.HeadActive || (bk.state == parking.HeadDeadLettered && w.opts.HoldEntity)
			if active && now.Sub(bk.since) >= staleAfter && !now.Before(bk.nextCheck) {
				bk.every = min(max(2*bk.every, minDescribeEvery), maxDescribeEvery)
				bk.nextCheck = now.Add(bk.every)
				stale = append(stale, staleHead{r, k, bk.head})
			}
		}
		r.mu.Unlock()
	}
	w.checkIncidentHeads(incidents)
	if len(stale) == 0 {
		return
	}
	slots := make(chan struct{}, describeConcurrency)
	pace := time.NewTicker(time.Second / describeRate)
	defer pace.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range stale {
		select {
		case <-w.ctx.Done():
			return
		case <-pace.C:
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			w.describeHead(s)
		}()
	}
}

// staleAfter is how long a retry head may stay active before the watcher
// describes it: its whole schedule, plus a margin for a slow worker.
func (w *headWatcher) staleAfter() time.Duration {
	plan := w.opts.Retry.Plan(w.opts.Mode)
	last := time.Duration(0)
	if n := len(plan.Offsets); n > 0 {
		last = plan.Offsets[n-1]
	}
	return last + 30*time.Second
}

// describeHead describes a retry head and records the state it is in when
// that is not active.
func (w *headWatcher) describeHead(s staleHead) {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.StartTimeout)
	defer cancel()
	state, err := retryHeadState(ctx, w.opts.Workflows, s.head)
	if err != nil {
		if w.ctx.Err() == nil {
			w.log.Debug("cannot describe a blocked key's head, next check retries", "headWorkflowId", s.head, "error", err.Error())
		}
		return
	}
	if state == parking.HeadActive {
		return
	}
	if _, err := parking.SetHeadState(ctx, w.opts.Parking.Pool(), s.head, state); err != nil {
		w.log.Debug("cannot record a blocked key's head state, next check retries", "headWorkflowId", s.head, "error", err.Error())
		return
	}
	w.log.Info("a blocked key's head settled without recording it: recorded from Temporal", "event", "projection_head_described",
		"projectionName", s.key.Projection, "forkId", s.key.ForkID, "entityId", s.key.EntityID, "headWorkflowId", s.head, "headState", string(state))
}

// retryHeadState is where the retry workflow head stands, as Temporal
// describes it: a run that does not exist or has closed has settled, an
// open dead letter is dead_lettered, a run that succeeded or was discarded
// has settled.
func retryHeadState(ctx context.Context, d contract.Describer, head string) (parking.HeadState, error) {
	resp, err := d.DescribeWorkflowExecution(ctx, head, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return parking.HeadSettled, nil
	}
	if err != nil {
		return "", err
	}
	info := resp.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return parking.HeadSettled, nil
	}
	switch {
	case contract.Final(info):
		return parking.HeadSettled, nil
	case contract.Settled(info):
		return parking.HeadDeadLettered, nil
	}
	return parking.HeadActive, nil
}

// checkIncidentHeads records the state of incident heads whose incident no
// longer holds (or has no row): their keys' events are released or
// dead-lettered as the incident workflow would have had them.
func (w *headWatcher) checkIncidentHeads(ids []string) {
	if len(ids) == 0 || w.opts.IncidentStore == nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.StartTimeout)
	defer cancel()
	states, err := w.opts.IncidentStore.States(ctx, ids)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		st, ok := states[id]
		head := parking.HeadSettled
		switch {
		case ok && st == contract.IncidentHolding:
			continue
		case st == contract.IncidentDeadLettered:
			head = parking.HeadDeadLetterAll
		}
		if _, err := parking.SetHeadState(ctx, w.opts.Parking.Pool(), id, head); err != nil {
			w.log.Debug("cannot record an incident head's state, next check retries", "incidentId", id, "error", err.Error())
		}
	}
}

// measureOldest sets the oldest-parked-event gauge from the owned
// partitions.
func (w *headWatcher) measureOldest(parts map[int32]*orderedRouter) {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.StartTimeout)
	defer cancel()
	var oldest time.Time
	for id, r := range parts {
		r.mu.Lock()
		n := r.parked
		r.mu.Unlock()
		if n == 0 {
			continue
		}
		at, err := w.opts.Parking.Oldest(ctx, w.opts.Topic, id)
		if err != nil {
			return
		}
		if !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	age := 0.0
	if !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	w.m.parkedOldest.Set(age)
}
