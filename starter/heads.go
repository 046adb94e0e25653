package starter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// The head watcher (CAUSET_ORDERING=entity): one goroutine per bridge that
// finds the blocked keys whose head has moved on and wakes their
// partitions, which release them (release.go).
//
// Where a head stands is recorded in its key's row by whoever moves it:
// the worker as a retry workflow succeeds (in the apply transaction),
// dead-letters (once the record is written), is discarded or its window ends; the
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
// the state it is found in is recorded as the worker would have. A head
// whose run had dead-lettered before its start found it (an event read
// again after its key was released) is described at the next look.
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

// run watches the heads of the owned partitions' keys until ctx ends. The
// describes of stale heads (paced, and slow when Temporal is) run on a
// goroutine of their own, so they never hold up the poll that releases
// settled keys.
func (w *headWatcher) run() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.every(staleCheckEvery, w.checkStaleHeads)
	}()
	var lastOldest time.Time
	w.every(headPoll, func(parts map[int32]*orderedRouter) {
		w.pollHeads(parts)
		if time.Since(lastOldest) >= oldestEvery {
			lastOldest = time.Now()
			w.measureOldest(parts)
		}
	})
	wg.Wait()
}

// every runs do with the owned partitions every period until ctx ends.
func (w *headWatcher) every(period time.Duration, do func(map[int32]*orderedRouter)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		if parts := w.partitions(); len(parts) > 0 {
			do(parts)
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
	r     *orderedRouter
	key   parking.Key
	head  string
	state parking.HeadState
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
			// A head whose start is pending is not in Temporal yet: it is
			// started by this owner or the next, never described.
			active := bk.state == parking.HeadActive || (bk.state == parking.HeadDeadLettered && w.opts.HoldEntity)
			// A head found ended (by this bridge or the previous owner)
			// whose event is not dead-lettered yet is resolved again.
			ended := bk.state == parking.HeadEnded
			if (ended || active && !bk.pending && (bk.describeSoon || now.Sub(bk.since) >= staleAfter)) && !now.Before(bk.nextCheck) {
				bk.describeSoon = false
				bk.every = min(max(2*bk.every, minDescribeEvery), maxDescribeEvery)
				bk.nextCheck = now.Add(bk.every)
				stale = append(stale, staleHead{r, k, bk.head, bk.state})
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
	if w.opts.headStaleAfter > 0 {
		return w.opts.headStaleAfter
	}
	plan := w.opts.Retry.Plan(w.opts.Mode)
	last := time.Duration(0)
	if n := len(plan.Offsets); n > 0 {
		last = plan.Offsets[n-1]
	}
	return last + 30*time.Second
}

// describeHead describes a retry head and records the state it is in when
// that is not active. A head that ended without an outcome is resolved by
// the bridge (endedWithoutOutcome).
func (w *headWatcher) describeHead(s staleHead) {
	if s.state == parking.HeadEnded {
		w.endedWithoutOutcome(s, "ended earlier")
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.StartTimeout)
	defer cancel()
	state, ended, err := retryHeadState(ctx, w.opts.Workflows, s.head)
	if err != nil {
		if w.ctx.Err() == nil {
			w.log.Debug("cannot describe a blocked key's head, next check retries", "headWorkflowId", s.head, "error", err.Error())
		}
		return
	}
	if state == parking.HeadActive {
		return
	}
	if ended != "" && s.state == parking.HeadActive {
		// Its run is gone before it recorded an outcome: its dead letter,
		// if the run wrote one, would have recorded dead_lettered first.
		w.endedWithoutOutcome(s, ended)
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
// describes it: a run that completed has settled (it recorded how, as it
// succeeded, was discarded or its window ended), an open dead letter is
// dead_lettered, an open run is active. A run that ended any other way —
// terminated, timed out, failed, cancelled, or not found although it was
// started — has no outcome: ended says how it ended, and its state is
// settled only once the bridge has resolved its event.
func retryHeadState(ctx context.Context, d contract.Describer, head string) (state parking.HeadState, ended string, err error) {
	resp, err := d.DescribeWorkflowExecution(ctx, head, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return parking.HeadSettled, "not found", nil
	}
	if err != nil {
		return "", "", err
	}
	info := resp.GetWorkflowExecutionInfo()
	switch st := info.GetStatus(); st {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return parking.HeadSettled, "", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return parking.HeadSettled, "terminated", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return parking.HeadSettled, "timed out", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return parking.HeadSettled, "failed", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return parking.HeadSettled, "canceled", nil
	default:
		return parking.HeadSettled, strings.ToLower(st.String()), nil
	}
	switch {
	case contract.Final(info):
		return parking.HeadSettled, "", nil
	case contract.Settled(info):
		return parking.HeadDeadLettered, "", nil
	}
	return parking.HeadActive, "", nil
}

// endedWithoutOutcome resolves the event of a retry head whose run ended
// without applying or dead-lettering it (CONTRACT §14). First the head is
// marked ended (parking.EndHead), which waits for an attempt of the run
// still committing and refuses any later one, so nothing of the run applies
// after this; then, applied after all (the dedupe ledger says so), the key
// is released; otherwise the bridge dead-letters the event from the key's
// row, saying how its run ended, and then releases the key. A head recorded
// without its input (by the previous release) is released as before, with
// a warning.
func (w *headWatcher) endedWithoutOutcome(s staleHead, ended string) {
	p := s.r.p
	log := w.log.With("projectionName", s.key.Projection, "forkId", s.key.ForkID, "entityId", s.key.EntityID, "headWorkflowId", s.head)
	var in *contract.RetryInput
	var applied, ours bool
	var now parking.HeadState
	if !p.until(log, "database", "cannot read the head of a key whose run ended", func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, w.opts.Parking.Pool(), func(tx pgx.Tx) (err error) {
			if ours, now, err = parking.EndHead(ctx, tx, s.head); err != nil || !ours {
				return err
			}
			if in, err = parking.HeadInput(ctx, tx, p.topic, p.id, s.key, s.head); err != nil || in == nil {
				return err
			}
			applied, err = projection.WasApplied(ctx, tx, in.Projection, in.Event)
			return err
		})
	}) {
		return
	}
	if !ours {
		// Its run recorded an outcome: the poll takes it, but for a dead
		// letter held under CAUSET_DLQ_HOLD_ENTITY, whose run is gone now
		// and can no longer be replayed or discarded: its key goes on.
		if now == parking.HeadDeadLettered {
			p.until(log, "database", "cannot record a held dead letter whose run ended", func(ctx context.Context) error {
				_, err := parking.SetHeadState(ctx, w.opts.Parking.Pool(), s.head, parking.HeadSettled)
				return err
			})
			log.Info("a dead letter's run ended: its key is released", "event", "projection_head_described", "headEnded", ended)
		}
		return
	}
	s.r.mu.Lock()
	if k := s.r.keys[s.key]; k != nil && k.head == s.head {
		k.state = parking.HeadEnded
	}
	s.r.mu.Unlock()
	switch {
	case in == nil:
		log.Warn("a blocked key's head ended without an outcome and its event is not recorded with the key: key released",
			"event", "projection_head_described", "headEnded", ended)
	case applied:
		log.Info("a blocked key's head ended after applying its event: key released", "event", "projection_head_described", "headEnded", ended)
	default:
		now := time.Now().UTC()
		why := "retry workflow " + in.WorkflowID() + " ended (" + ended + ") before applying or dead-lettering the event: dead-lettered by the bridge"
		if !p.publishDeadLetter(p.parkedLog(*in), "event of a head that ended without an outcome", in.Key, dlq.RunRecord(bridgeLetter(*in, now, why), now)) {
			return
		}
	}
	p.until(log, "database", "cannot record a resolved head", func(ctx context.Context) error {
		_, err := parking.SetHeadState(ctx, w.opts.Parking.Pool(), s.head, parking.HeadSettled)
		return err
	})
}

// bridgeLetter is the dead letter the bridge writes for a retry input's
// event that it resolves itself (a head whose run ended without an
// outcome, an event an incident dead-lettered): its attempt 1 if the bridge
// made one, then an attempt saying why, of the last error kind known.
func bridgeLetter(in contract.RetryInput, now time.Time, why string) contract.DeadLetterInput {
	var attempts []contract.Attempt
	kind := string(contract.KindSQL)
	if in.FirstAttempt != nil {
		attempts = append(attempts, *in.FirstAttempt)
		kind = in.FirstAttempt.ErrorKind
	}
	attempts = append(attempts, contract.Attempt{Number: len(attempts) + 1, StartedAt: now, ErrorKind: kind, Error: why})
	dl := contract.DeadLetterInput{Event: in.Event, Key: in.Key, Projection: in.Projection, Attempts: attempts, Source: in.Source}
	if in.FirstAttempt != nil {
		dl.IRVersion = in.FirstAttempt.IRVersion
	}
	return dl
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
		case st == contract.IncidentDeadLettering, st == contract.IncidentDeadLettered:
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
