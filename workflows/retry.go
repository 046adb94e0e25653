package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
)

const publishTimeout = 30 * time.Second

// Change IDs for workflow.GetVersion.
const (
	// changeSignalAtWindowEnd honours a replay or discard delivered in the
	// workflow task in which the replay window's timer fired.
	changeSignalAtWindowEnd = "signal-at-window-end"
	// changeDeadLetterMemo records in the memo when the run was
	// dead-lettered and with which error kind (contract.MemoDeadLetteredAt).
	changeDeadLetterMemo = "dead-letter-memo"
	// changeAnyReplayPayload takes a replay whose payload is not the
	// documented object as a replay; before, it was skipped as if never sent.
	changeAnyReplayPayload = "any-replay-payload"
	// changeSettleHead records, when a dead-lettered run is discarded or its
	// window ends, that it no longer holds its key (SettleHead).
	changeSettleHead = "settle-head"
	// changeJoinHold lets a run whose schedule ran out with a failure a
	// holding incident has (policy hold) wait with the incident's events
	// instead of being dead-lettered.
	changeJoinHold = "join-hold"
	// changeHoldTimerOnce arms an incident's hold deadline once per run
	// instead of at every probe.
	changeHoldTimerOnce = "hold-timer-once"
	// changeIncidentMovesFrom makes an incident's row moves compare-and-set
	// and drains a dead-letter-all in state dead_lettering.
	changeIncidentMovesFrom = "incident-moves-from"
	// changeIncidentTakesOverReopen lets an incident run that a bridge
	// signalled after its final move (a reopen of its row: a new hold)
	// continue as new with that hold instead of leaving it without a run.
	changeIncidentTakesOverReopen = "incident-takes-over-reopen"
	// changeHoldWithoutSlot makes a held run ask whether its incident
	// still holds on the server's retry backoff (and at once when woken by
	// SignalHoldEnded) instead of in one activity that took a worker slot
	// for the whole hold: held runs as many as the worker's slots starved
	// the incident of the slot its own moves need.
	changeHoldWithoutSlot = "hold-without-slot"
)

// holdAskRetry is how often a held run asks whether its incident still
// holds, when no SignalHoldEnded wakes it first. The server runs the
// retries: nothing is written to history and no worker slot is taken in
// between, however long the hold (at most CAUSET_INCIDENT_HOLD_MAX).
var holdAskRetry = &temporal.RetryPolicy{
	InitialInterval:    5 * time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    2 * time.Minute,
}

// deadLetterRetry never gives up: the record must not be lost, so the
// workflow waits for the topic to come back rather than closing without it.
var deadLetterRetry = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    time.Minute,
	MaximumAttempts:    0,
}

// ProjectionRetryWorkflow retries one (projection, event) on the configured
// schedule, dead-letters it when every attempt failed, then waits for a
// replay or discard signal for the replay window.
func ProjectionRetryWorkflow(ctx workflow.Context, in contract.RetryInput) (contract.Status, error) {
	r := &retryRun{in: in, status: contract.Status{State: contract.StateRetrying, Projection: in.Projection, EventID: in.Event.EventID},
		maxAttempts: len(in.Retry.Plan(in.Mode).Offsets)}
	if err := workflow.SetQueryHandler(ctx, contract.QueryStatus, r.query); err != nil {
		return r.status, err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, in.SearchAttributeUpdates()...); err != nil {
		return r.status, err
	}
	if in.Replay != nil {
		r.took(ctx, contract.SignalReplay, *in.Replay, contract.OutcomeRestarted)
	}

	plan := in.Retry.Plan(in.Mode)
	var attempt1 time.Time
	if in.FirstAttempt != nil {
		a := *in.FirstAttempt
		r.status.Attempts = append(r.status.Attempts, a)
		r.status.IRVersion = a.IRVersion
		attempt1 = a.StartedAt
	}
	ok := r.runSchedule(ctx, plan, 0, attempt1)

	replay := workflow.GetSignalChannel(ctx, contract.SignalReplay)
	discard := workflow.GetSignalChannel(ctx, contract.SignalDiscard)
	for !ok {
		end, err := r.joinHold(ctx)
		if err != nil {
			return r.status, err
		}
		if end == contract.IncidentReleasing || end == contract.IncidentResolved {
			// The incident's fix is this event's too: the whole schedule again.
			r.status.ReplayCount++
			if err := r.setState(ctx, contract.StateReplaying); err != nil {
				return r.status, err
			}
			ok = r.runSchedule(ctx, in.Retry.Plan(config.ModeWorkflow), r.status.ReplayCount, time.Time{})
			continue
		}
		if err := r.deadLetter(ctx); err != nil {
			return r.status, err
		}
		if err := r.setState(ctx, contract.StateDeadLettered); err != nil {
			return r.status, err
		}
		if err := r.markDeadLettered(ctx); err != nil {
			return r.status, err
		}
		r.tellLane(ctx)
		next := r.awaitDecision(ctx, replay, discard)
		switch next {
		case contract.SignalDiscard:
			err := r.setState(ctx, contract.StateDiscarded)
			if err == nil {
				err = r.settleHead(ctx)
			}
			r.ignorePending(ctx, replay, discard)
			return r.status, err
		case "":
			workflow.GetLogger(ctx).Info("replay window expired", "window", in.ReplayWindow)
			err := r.settleHead(ctx)
			r.ignorePending(ctx, replay, discard)
			return r.status, err
		}
		r.status.ReplayCount++
		if err := r.setState(ctx, contract.StateReplaying); err != nil {
			return r.status, err
		}
		ok = r.runSchedule(ctx, in.Retry.Plan(config.ModeWorkflow), r.status.ReplayCount, time.Time{})
	}
	err := r.setState(ctx, contract.StateSucceeded)
	r.ignorePending(ctx, replay, discard)
	return r.status, err
}

type retryRun struct {
	in     contract.RetryInput
	status contract.Status
	// maxAttempts is the attempts of a run of the schedule, for the UI.
	maxAttempts int
	toldLane    bool
	// force is the last replay's "force": apply even past later events.
	force bool
	// lost counts the attempts lost with their worker and tried again.
	lost int
	// retryLostID is the activity ID of the next ApplyProjection, when it
	// tries again an attempt lost with its worker (runSchedule).
	retryLostID string
}

// lostRetryActivityID names the activity that tries again the lost last
// attempt of a run's replay count run, the lost-th time. The previous
// release knows no such step: a worker of it taking this run's next task (a
// rollback, or a fleet mid-roll) replays the history with code that
// schedules its next activity (a dead letter) where this one is. Under the
// SDK's own sequential ID the two match by ID, this attempt's failure is
// taken for the dead letter's, and the run fails (the SDK checks the
// commands against the history only when the run does not end in the
// replay). Under an ID of its own the old worker's replay meets an activity
// it never scheduled and fails the task instead, which a worker of this
// release then takes.
func lostRetryActivityID(run, lost int) string {
	return fmt.Sprintf("apply-lost-attempt-run-%d-%d", run, lost)
}

func (r *retryRun) setState(ctx workflow.Context, s contract.State) error {
	r.status.State = s
	if s != contract.StateRetrying && s != contract.StateReplaying {
		r.status.Schedule = nil
	}
	r.describe(ctx)
	updates := []temporal.SearchAttributeUpdate{contract.AttrRetryState.ValueSet(string(s))}
	if n := len(r.status.Attempts); n > 0 && r.status.Attempts[n-1].Error != "" && (s == contract.StateDeadLettered || s == contract.StateHeld) {
		updates = append(updates, contract.AttrError.ValueSet(contract.Short(r.status.Attempts[n-1].Error, contract.SummaryErrorRunes)))
	}
	return workflow.UpsertTypedSearchAttributes(ctx, updates...)
}

// describe sets the run's current details (the Temporal UI's page answers
// them from the workflow's memory: nothing is written to history).
func (r *retryRun) describe(ctx workflow.Context) {
	workflow.SetCurrentDetails(ctx, r.status.CurrentDetails(workflow.GetInfo(ctx).WorkflowExecution.ID, r.maxAttempts))
}

// query answers the status query. The activity's retries are timed by the
// server, so the next retry time is the first planned start still ahead of
// the clock. Queries write nothing to history, so reading the wall clock
// here cannot break replay.
func (r *retryRun) query() (contract.Status, error) {
	st := r.status
	st.Attempts = append([]contract.Attempt(nil), st.Attempts...)
	if n := len(st.Attempts); n > 0 {
		st.WaitingBehind = st.Attempts[n-1].WaitingBehind
	}
	now := time.Now() //workflowcheck:ignore
	for _, at := range st.Schedule {
		if at.After(now) {
			st.NextRetryAt = &at
			break
		}
	}
	return st, nil
}

// retryPolicy is the activity's Temporal retry policy for the plan's
// schedule; invalid_event is never retried.
func retryPolicy(p *config.ActivityRetry) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:        p.InitialInterval,
		BackoffCoefficient:     p.BackoffCoefficient,
		MaximumInterval:        p.MaximumInterval,
		MaximumAttempts:        p.MaximumAttempts,
		NonRetryableErrorTypes: contract.NonRetryableErrorTypes,
	}
}

// runSchedule runs the activity with the plan's retry policy and reports
// whether the event was applied. attempt1 is when the bridge's attempt 1
// started (inline mode); the first activity attempt waits until
// attempt1+FirstWait so both modes keep the same wall-clock schedule.
func (r *retryRun) runSchedule(ctx workflow.Context, plan config.Plan, run int, attempt1 time.Time) bool {
	activityID := r.retryLostID // "": the SDK's own
	r.retryLostID = ""
	if plan.Policy == nil {
		return false
	}
	base := attempt1
	if plan.FirstWait == 0 {
		// The first activity attempt is due now (a later one after an
		// outage: the schedule goes on from it).
		base = workflow.Now(ctx).Add(-plan.Offsets[plan.FirstActivityAttempt-1])
	}
	r.status.Schedule = r.status.Schedule[:0]
	for _, off := range plan.Offsets[plan.FirstActivityAttempt-1:] {
		r.status.Schedule = append(r.status.Schedule, base.Add(off))
	}
	r.describe(ctx)
	if plan.FirstWait > 0 {
		due := attempt1.Add(plan.FirstWait)
		if wait := due.Sub(workflow.Now(ctx)); wait > 0 {
			timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{
				Summary: contract.AttemptTimerSummary(plan.FirstActivityAttempt, len(plan.Offsets))})
			if err := timer.Get(ctx, nil); err != nil {
				return false
			}
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          activityID,
		StartToCloseTimeout: contract.ApplyTimeout,
		HeartbeatTimeout:    contract.ApplyHeartbeatTimeout,
		RetryPolicy:         retryPolicy(plan.Policy),
		Summary:             contract.ApplySummary(plan, run),
	})
	in := contract.ApplyInput{
		Event:        r.in.Event,
		Projection:   r.in.Projection,
		Run:          run,
		FirstAttempt: plan.FirstActivityAttempt,
		Delays:       plan.Delays,
		MaxAttempts:  len(plan.Offsets),
		Force:        r.force,
		Restarted:    r.in.Replay != nil,
	}
	var out contract.ApplyOutput
	err := workflow.ExecuteActivity(actx, contract.ApplyProjectionActivity, in).Get(ctx, &out)
	if err == nil {
		r.status.Attempts = append(r.status.Attempts, out.Attempts...)
		r.status.Attempts = append(r.status.Attempts, contract.Attempt{Number: out.Attempt, Run: run, StartedAt: out.StartedAt, IRVersion: out.IRVersion})
		r.status.IRVersion = out.IRVersion
		return true
	}
	var outage *temporal.ApplicationError
	if errors.As(err, &outage) && outage.Type() == contract.DatabaseOutageType &&
		workflow.GetVersion(ctx, "outage-is-no-attempt", workflow.DefaultVersion, 1) == 1 {
		// The attempt met a database that does not answer: it counts as
		// none. The run waits until the database answers, then tries it
		// again and goes on with the rest of the schedule.
		var earlier []contract.Attempt
		if outage.HasDetails() {
			_ = outage.Details(&earlier)
		}
		r.status.Attempts = append(r.status.Attempts, earlier...)
		next := plan.FirstActivityAttempt
		if n := len(earlier); n > 0 {
			next = earlier[n-1].Number + 1
		}
		if !r.awaitDatabase(ctx) {
			return false
		}
		return r.runSchedule(ctx, plan.From(next), run, time.Time{})
	}
	if earlier, ok := lostAttempt(err, len(plan.Offsets)); ok && r.lost < contract.MaxLostAttempts &&
		workflow.GetVersion(ctx, "lost-last-attempt-is-no-attempt", workflow.DefaultVersion, 1) == 1 {
		// The schedule's last attempt went with its worker before it
		// reported: not the event's failure, and nothing else would try the
		// event again. It counts as none and is tried again at once. (An
		// earlier attempt lost so is retried by the server as the next one.)
		r.lost++
		workflow.GetLogger(ctx).Warn("the last attempt was lost with its worker: it counts as none and is tried again",
			"event", "projection_attempt_lost", "projectionName", r.in.Projection, "eventId", r.in.Event.EventID,
			"retryAttempt", len(plan.Offsets), "lost", r.lost)
		r.status.Attempts = append(r.status.Attempts, earlier...)
		r.retryLostID = lostRetryActivityID(run, r.lost)
		return r.runSchedule(ctx, plan.From(len(plan.Offsets)), run, time.Time{})
	}
	r.status.Attempts = append(r.status.Attempts, failedAttempts(ctx, err, run, plan.FirstActivityAttempt)...)
	if n := len(r.status.Attempts); n > 0 && r.status.Attempts[n-1].IRVersion != 0 {
		r.status.IRVersion = r.status.Attempts[n-1].IRVersion
	}
	return false
}

// databaseAsk is how the server asks DatabaseAnswers again while the
// database does not answer: nothing is written to the run's history between
// asks, and no worker slot is held.
var databaseAsk = &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second}

// awaitDatabase waits until the database answers a probe, however long it
// is down (a day's wait ends and is asked again); false when the run is
// cancelled meanwhile.
func (r *retryRun) awaitDatabase(ctx workflow.Context) bool {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            databaseAsk,
		Summary:                "waiting for the database to answer (an outage: the attempt counts as none)",
	})
	for {
		err := workflow.ExecuteActivity(actx, contract.DatabaseAnswersActivity).Get(ctx, nil)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
}

// lostAttempt reports an activity whose last attempt was lost with its
// worker: the server timed it out on its heartbeat (which it retries but
// for the schedule's last attempt, so that is the one lost). It returns the
// attempts before it, from the heartbeat details where each attempt records
// itself as it starts (a lost attempt may have gone before it recorded).
func lostAttempt(err error, last int) (earlier []contract.Attempt, ok bool) {
	var timeoutErr *temporal.TimeoutError
	if !errors.As(err, &timeoutErr) || timeoutErr.TimeoutType() != enumspb.TIMEOUT_TYPE_HEARTBEAT {
		return nil, false
	}
	var attempts []contract.Attempt
	if timeoutErr.HasLastHeartbeatDetails() && timeoutErr.LastHeartbeatDetails(&attempts) != nil {
		attempts = nil // a decode failure only loses the earlier attempts' history
	}
	for _, a := range attempts {
		if a.Number < last {
			earlier = append(earlier, a)
		}
	}
	return contract.SettleUnreported(earlier), true
}

// failedAttempts recovers every attempt of a failed activity: the activity
// carries its earlier attempts forward and returns them all as the details
// of its last ApplicationError, since history keeps only the last failure.
// A last attempt that timed out returned nothing; its attempts, itself
// included, are in the heartbeat details the timeout carries. first is the
// overall number of the activity's first attempt.
func failedAttempts(ctx workflow.Context, err error, run, first int) []contract.Attempt {
	// The timeout is checked first: its cause may be the previous attempt's
	// ApplicationError, whose details lack the attempt that timed out.
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		var attempts []contract.Attempt
		if timeoutErr.HasLastHeartbeatDetails() {
			// A decode failure only loses the earlier attempts' history.
			_ = timeoutErr.LastHeartbeatDetails(&attempts)
		}
		n := len(attempts)
		if n > 0 && attempts[n-1].ErrorKind == "" {
			return contract.SettleUnreported(attempts)
		}
		// An attempt run by an older worker records no start: it is the one
		// after the last recorded attempt.
		next := first
		if n > 0 {
			next = attempts[n-1].Number + 1
		}
		return contract.SettleUnreported(append(attempts, contract.Attempt{Number: next, Run: run, StartedAt: workflow.Now(ctx)}))
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		var attempts []contract.Attempt
		if derr := appErr.Details(&attempts); derr == nil && len(attempts) > 0 {
			return attempts
		}
	}
	// A panic leaves no details: record what is known, as an execution error.
	kind := string(contract.KindSQL)
	if appErr != nil && appErr.Type() != "" {
		kind = appErr.Type()
	}
	return []contract.Attempt{{Number: 0, Run: run, StartedAt: workflow.Now(ctx), ErrorKind: kind, Error: err.Error()}}
}

func (r *retryRun) deadLetter(ctx workflow.Context) error {
	var this []contract.Attempt
	for _, a := range r.status.Attempts {
		if a.Run == r.status.ReplayCount {
			this = append(this, a)
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: publishTimeout,
		RetryPolicy:         deadLetterRetry,
		Summary:             "publish the dead letter to the DLQ topic",
	})
	in := contract.DeadLetterInput{
		Event:       r.in.Event,
		Key:         r.in.Key,
		Projection:  r.in.Projection,
		IRVersion:   r.status.IRVersion,
		Attempts:    this,
		ReplayCount: r.status.ReplayCount,
		Source:      r.in.Source,
	}
	var at contract.DLQCoordinates
	if err := workflow.ExecuteActivity(actx, contract.PublishDeadLetterActivity, in).Get(ctx, &at); err != nil {
		return err
	}
	r.status.DLQ = &at
	return nil
}

// joinHold, once the schedule has run out, asks whether a holding incident
// has this run's last failure (policy hold). If one has, the run waits in
// state held until the incident no longer holds, and returns where it went
// (releasing or resolved: run again; dead_lettered: dead-letter); "" when no
// incident holds the failure.
func (r *retryRun) joinHold(ctx workflow.Context) (contract.IncidentState, error) {
	n := len(r.status.Attempts)
	if n == 0 || workflow.GetVersion(ctx, changeJoinHold, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return "", nil
	}
	last := r.status.Attempts[n-1]
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: publishTimeout,
		RetryPolicy:         deadLetterRetry,
		Summary:             "does a holding incident have this failure?",
	})
	var id string
	if err := workflow.ExecuteActivity(actx, contract.JoinIncidentHoldActivity,
		contract.JoinHoldInput{Projection: r.in.Projection, ErrorKind: last.ErrorKind, Error: last.Error}).Get(ctx, &id); err != nil {
		return "", err
	}
	if id == "" {
		return "", nil
	}
	r.status.HeldBy = id
	if err := r.setState(ctx, contract.StateHeld); err != nil {
		return "", err
	}
	if workflow.GetVersion(ctx, changeHoldWithoutSlot, workflow.DefaultVersion, 1) >= 1 {
		end, err := r.awaitHoldEnd(ctx, id)
		if err != nil {
			return "", err
		}
		r.status.HeldBy = ""
		return end, nil
	}
	wctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         deadLetterRetry,
		Summary:             "held by incident " + id,
	})
	var end contract.IncidentState
	if err := workflow.ExecuteActivity(wctx, contract.AwaitIncidentEndedActivity, id).Get(ctx, &end); err != nil {
		return "", err
	}
	r.status.HeldBy = ""
	return end, nil
}

// awaitHoldEnd waits until incident id no longer holds and returns where it
// went. The ask is one activity the server retries on holdAskRetry while
// the incident holds, for up to a day; SignalHoldEnded (sent as an
// incident leaves holding) cancels the pending ask and asks again at once.
// An ask that ends without an answer (its day is over, the database was
// down all that time, a wake cancelled it) is asked again: a held run ends
// with its incident, whose hold is bounded (CAUSET_INCIDENT_HOLD_MAX).
func (r *retryRun) awaitHoldEnd(ctx workflow.Context, id string) (contract.IncidentState, error) {
	woken := workflow.GetSignalChannel(ctx, contract.SignalHoldEnded)
	for {
		askCtx, cancel := workflow.WithCancel(ctx)
		askCtx = workflow.WithActivityOptions(askCtx, workflow.ActivityOptions{
			StartToCloseTimeout:    publishTimeout,
			ScheduleToCloseTimeout: 24 * time.Hour,
			RetryPolicy:            holdAskRetry,
			Summary:                "held by incident " + id,
		})
		ask := workflow.ExecuteActivity(askCtx, contract.IncidentHoldEndedActivity, id)
		var end contract.IncidentState
		var err error
		wake := false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(ask, func(f workflow.Future) { err = f.Get(ctx, &end) })
		sel.AddReceive(woken, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			wake = true
		})
		sel.Select(ctx)
		if wake {
			for woken.ReceiveAsync(nil) {
			}
			cancel()
			err = ask.Get(ctx, &end)
		}
		cancel()
		if err == nil {
			return end, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
}

// settleHead lets the key a dead letter held (CAUSET_DLQ_HOLD_ENTITY) go:
// its parked events are released. Its retry policy never gives up, as the
// dead letter's: a key must not stay blocked behind a closed run.
func (r *retryRun) settleHead(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, changeSettleHead, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: publishTimeout,
		RetryPolicy:         deadLetterRetry,
		Summary:             "release the key's events parked behind this run",
	})
	return workflow.ExecuteActivity(actx, contract.SettleHeadActivity, workflow.GetInfo(ctx).WorkflowExecution.ID).Get(ctx, nil)
}

// tellLane lets an ordering lane of the release before parked events, that
// started this run, move on to the key's
// next event once this one is dead-lettered; the run itself stays open for
// replay. Only the first dead letter matters to the lane.
func (r *retryRun) tellLane(ctx workflow.Context) {
	parent := workflow.GetInfo(ctx).ParentWorkflowExecution
	if parent == nil || r.toldLane {
		return
	}
	r.toldLane = true
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	// The lane may have closed already; that is no reason to fail this run.
	if err := workflow.SignalExternalWorkflow(ctx, parent.ID, "", contract.SignalChildSettled,
		contract.ChildSettled{WorkflowID: id, State: contract.StateDeadLettered}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Info("lane not told of dead letter", "lane", parent.ID, "error", err)
	}
}

// awaitDecision waits for replay or discard until the replay window ends; it
// returns the signal's name, or "" when the window expired.
func (r *retryRun) awaitDecision(ctx workflow.Context, replay, discard workflow.ReceiveChannel) string {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	var got string
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(replay, func(c workflow.ReceiveChannel, _ bool) {
		for {
			var raw converter.RawValue
			c.Receive(ctx, &raw)
			if s, ok := r.replaySignal(ctx, raw); ok {
				r.took(ctx, contract.SignalReplay, s, contract.OutcomeActed)
				break
			}
		}
		got = contract.SignalReplay
	})
	sel.AddReceive(discard, func(c workflow.ReceiveChannel, _ bool) {
		var raw converter.RawValue
		c.Receive(ctx, &raw)
		r.took(ctx, contract.SignalDiscard, operatorSignal(raw), contract.OutcomeActed)
		got = contract.SignalDiscard
	})
	window := r.in.ReplayWindow
	if window <= 0 {
		window = contract.DefaultReplayWindow
	}
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, window, workflow.TimerOptions{
		Summary: "replay window: " + window.String() + " for a replay or discard signal"}), func(workflow.Future) {})
	sel.Select(ctx)
	if got == "" {
		got = r.signalAtWindowEnd(ctx, replay, discard)
	}
	// Replay signals sent while this one was pending (a CLI signal and a bulk
	// replay, say) ask for the same thing; one replay answers them all.
	if got == contract.SignalReplay {
		r.drain(ctx, contract.SignalReplay, replay, contract.OutcomeCoalesced)
	} else {
		r.drain(ctx, contract.SignalReplay, replay, contract.OutcomeIgnored)
	}
	return got
}

// signalAtWindowEnd takes a replay or discard that arrived in the workflow
// task in which the window's timer fired. The server accepted it, so its
// sender was told it succeeded; closing as expired would silently drop it.
// A replay wins over a discard, as it does in awaitDecision's selector.
func (r *retryRun) signalAtWindowEnd(ctx workflow.Context, replay, discard workflow.ReceiveChannel) string {
	if replay.Len() == 0 && discard.Len() == 0 {
		return ""
	}
	if workflow.GetVersion(ctx, changeSignalAtWindowEnd, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ""
	}
	for {
		var raw converter.RawValue
		if !replay.ReceiveAsync(&raw) {
			break
		}
		if s, ok := r.replaySignal(ctx, raw); ok {
			r.took(ctx, contract.SignalReplay, s, contract.OutcomeActed)
			return contract.SignalReplay
		}
	}
	var raw converter.RawValue
	discard.ReceiveAsync(&raw)
	r.took(ctx, contract.SignalDiscard, operatorSignal(raw), contract.OutcomeActed)
	return contract.SignalDiscard
}

// replaySignal reads a replay payload. Runs read it as the object (or
// nothing) and skipped any other payload as if never sent, which left a run
// waiting after a mistyped --input; from changeAnyReplayPayload on, any
// payload is a replay. The version is asked only for such a payload, so
// other histories are unchanged; a skipped one is logged as ignored.
func (r *retryRun) replaySignal(ctx workflow.Context, raw converter.RawValue) (contract.OperatorSignal, bool) {
	s := operatorSignal(raw)
	if p := raw.Payload(); p != nil {
		var strict struct {
			Reason string `json:"reason"`
		}
		if converter.GetDefaultDataConverter().FromPayload(p, &strict) != nil &&
			workflow.GetVersion(ctx, changeAnyReplayPayload, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			r.logAction(ctx, contract.SignalReplay, s, contract.OutcomeIgnored)
			return s, false
		}
	}
	return s, true
}

// markDeadLettered records the dead letter's time and error kind in the
// memo, which visibility lists return: the worker's dead-letter gauges read
// them there (no ORDER BY or custom search attribute needed).
func (r *retryRun) markDeadLettered(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, changeDeadLetterMemo, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	kind := ""
	if n := len(r.status.Attempts); n > 0 {
		kind = r.status.Attempts[n-1].ErrorKind
	}
	return workflow.UpsertMemo(ctx, map[string]any{
		contract.MemoDeadLetteredAt: workflow.Now(ctx).UTC(),
		contract.MemoErrorKind:      kind,
	})
}

// operatorSignal reads a replay or discard payload leniently: any payload
// is still the operator's decision, so one that is not the documented object
// (a bare string is taken as the reason) must not make the signal vanish,
// as a failed decode in Receive would.
func operatorSignal(raw converter.RawValue) contract.OperatorSignal {
	var s contract.OperatorSignal
	p := raw.Payload()
	if p == nil {
		return s
	}
	dc := converter.GetDefaultDataConverter()
	if dc.FromPayload(p, &s) == nil {
		return s
	}
	var reason string
	if dc.FromPayload(p, &reason) == nil {
		s.Reason = reason
	}
	return s
}

// took records an operator decision the run acts on.
func (r *retryRun) took(ctx workflow.Context, action string, s contract.OperatorSignal, outcome string) {
	r.status.LastAction = &contract.OperatorAction{Action: action, Identity: s.Identity, Reason: s.Reason, At: workflow.Now(ctx).UTC()}
	if action == contract.SignalReplay {
		r.status.LastReplayReason = s.Reason
		r.force = s.Force
	}
	r.logAction(ctx, action, s, outcome)
}

// drain logs, with outcome, every signal still queued on ch.
func (r *retryRun) drain(ctx workflow.Context, action string, ch workflow.ReceiveChannel, outcome string) {
	for {
		var raw converter.RawValue
		if !ch.ReceiveAsync(&raw) {
			return
		}
		r.logAction(ctx, action, operatorSignal(raw), outcome)
	}
}

// ignorePending logs the replay and discard signals queued as the run
// closes: their senders were told they were delivered, and nothing acts on
// them.
func (r *retryRun) ignorePending(ctx workflow.Context, replay, discard workflow.ReceiveChannel) {
	r.drain(ctx, contract.SignalReplay, replay, contract.OutcomeIgnored)
	r.drain(ctx, contract.SignalDiscard, discard, contract.OutcomeIgnored)
}

// logAction writes the projection_operator_action line and counts it.
// Temporal keeps a signal only in its run's history and a batch job only
// for a while, so the logs and the counter are the lasting trail. Both are
// replay-safe: the SDK drops them while replaying history.
func (r *retryRun) logAction(ctx workflow.Context, action string, s contract.OperatorSignal, outcome string) {
	workflow.GetLogger(ctx).Info("projection_operator_action",
		"event", "projection_operator_action", "action", action, "outcome", outcome,
		"identity", s.Identity, "reason", s.Reason,
		"projectionName", r.in.Projection, "eventType", r.in.Event.EventType, "entityId", r.in.Event.EntityID,
		"forkId", r.in.Event.ForkID, "eventId", r.in.Event.EventID,
		"workflowId", workflow.GetInfo(ctx).WorkflowExecution.ID,
		"state", string(r.status.State), "replayCount", r.status.ReplayCount)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{
		"projection": r.in.Projection, "action": action, "outcome": outcome,
	}).Counter(contract.MetricOperatorActions).Inc(1)
}
