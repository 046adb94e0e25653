package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// ApplyInput is the ApplyProjection activity's input.
type ApplyInput struct {
	Event      event.Envelope `json:"event"`
	Projection string         `json:"projection"`
	// Run is 0 for the original schedule, n for the n-th replay.
	Run int `json:"run,omitempty"`
	// FirstAttempt is the overall number of the activity's first attempt (2 in
	// inline mode, where the bridge made attempt 1).
	FirstAttempt int `json:"firstAttempt"`
	// Delays is the plan's waits between attempts, for the nextRetryIn log field.
	Delays []time.Duration `json:"delays"`
	// MaxAttempts is the total number of attempts of a run.
	MaxAttempts int `json:"maxAttempts"`
}

// ApplyOutput is ApplyProjection's result on success.
type ApplyOutput struct {
	IRVersion int  `json:"irVersion"`
	Duplicate bool `json:"duplicate,omitempty"`
	// Attempts are the activity's failed attempts before the one that succeeded.
	Attempts []contract.Attempt `json:"attempts,omitempty"`
	// Attempt is the overall number of the attempt that succeeded.
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"startedAt"`
}

const (
	applyTimeout   = time.Minute
	publishTimeout = 30 * time.Second
)

// Change IDs for workflow.GetVersion.
const (
	// changeSignalAtWindowEnd honours a replay or discard delivered in the
	// workflow task in which the replay window's timer fired.
	changeSignalAtWindowEnd = "signal-at-window-end"
)

// SettleUnreported marks as timed out every attempt in attempts that started
// but never reported its outcome. ApplyProjection records each attempt in its
// heartbeat details as it starts, so an attempt that overran its
// StartToClose timeout (or whose worker was lost, which the server also ends
// as a timeout) is still there with its number and start time.
func SettleUnreported(attempts []contract.Attempt) []contract.Attempt {
	for i := range attempts {
		if attempts[i].ErrorKind == "" {
			attempts[i].ErrorKind = string(contract.KindSQL)
			attempts[i].Error = fmt.Sprintf("attempt timed out after %s", applyTimeout)
		}
	}
	return attempts
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
	r := &retryRun{in: in, status: contract.Status{State: contract.StateRetrying, Projection: in.Projection, EventID: in.Event.EventID}}
	if err := workflow.SetQueryHandler(ctx, contract.QueryStatus, r.query); err != nil {
		return r.status, err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, in.SearchAttributeUpdates()...); err != nil {
		return r.status, err
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
		if err := r.deadLetter(ctx); err != nil {
			return r.status, err
		}
		if err := r.setState(ctx, contract.StateDeadLettered); err != nil {
			return r.status, err
		}
		r.tellLane(ctx)
		next := r.awaitDecision(ctx, replay, discard)
		switch next {
		case contract.SignalDiscard:
			return r.status, r.setState(ctx, contract.StateDiscarded)
		case "":
			workflow.GetLogger(ctx).Info("replay window expired", "window", in.ReplayWindow)
			return r.status, nil
		}
		r.status.ReplayCount++
		if err := r.setState(ctx, contract.StateReplaying); err != nil {
			return r.status, err
		}
		ok = r.runSchedule(ctx, in.Retry.Plan(config.ModeWorkflow), r.status.ReplayCount, time.Time{})
	}
	return r.status, r.setState(ctx, contract.StateSucceeded)
}

type retryRun struct {
	in       contract.RetryInput
	status   contract.Status
	toldLane bool
}

func (r *retryRun) setState(ctx workflow.Context, s contract.State) error {
	r.status.State = s
	if s != contract.StateRetrying && s != contract.StateReplaying {
		r.status.Schedule = nil
	}
	return workflow.UpsertTypedSearchAttributes(ctx, contract.AttrRetryState.ValueSet(string(s)))
}

// query answers the status query. The activity's retries are timed by the
// server, so the next retry time is the first planned start still ahead of
// the clock. Queries write nothing to history, so reading the wall clock
// here cannot break replay.
func (r *retryRun) query() (contract.Status, error) {
	st := r.status
	st.Attempts = append([]contract.Attempt(nil), st.Attempts...)
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
	if plan.Policy == nil {
		return false
	}
	base := attempt1
	if plan.FirstWait == 0 {
		base = workflow.Now(ctx)
	}
	r.status.Schedule = r.status.Schedule[:0]
	for _, off := range plan.Offsets[plan.FirstActivityAttempt-1:] {
		r.status.Schedule = append(r.status.Schedule, base.Add(off))
	}
	if plan.FirstWait > 0 {
		due := attempt1.Add(plan.FirstWait)
		if wait := due.Sub(workflow.Now(ctx)); wait > 0 {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return false
			}
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: applyTimeout,
		RetryPolicy:         retryPolicy(plan.Policy),
	})
	in := ApplyInput{
		Event:        r.in.Event,
		Projection:   r.in.Projection,
		Run:          run,
		FirstAttempt: plan.FirstActivityAttempt,
		Delays:       plan.Delays,
		MaxAttempts:  len(plan.Offsets),
	}
	var out ApplyOutput
	err := workflow.ExecuteActivity(actx, contract.ApplyProjectionActivity, in).Get(ctx, &out)
	if err == nil {
		r.status.Attempts = append(r.status.Attempts, out.Attempts...)
		r.status.Attempts = append(r.status.Attempts, contract.Attempt{Number: out.Attempt, Run: run, StartedAt: out.StartedAt, IRVersion: out.IRVersion})
		r.status.IRVersion = out.IRVersion
		return true
	}
	r.status.Attempts = append(r.status.Attempts, failedAttempts(ctx, err, run, plan.FirstActivityAttempt)...)
	if n := len(r.status.Attempts); n > 0 && r.status.Attempts[n-1].IRVersion != 0 {
		r.status.IRVersion = r.status.Attempts[n-1].IRVersion
	}
	return false
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
			return SettleUnreported(attempts)
		}
		// An attempt run by an older worker records no start: it is the one
		// after the last recorded attempt.
		next := first
		if n > 0 {
			next = attempts[n-1].Number + 1
		}
		return SettleUnreported(append(attempts, contract.Attempt{Number: next, Run: run, StartedAt: workflow.Now(ctx)}))
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

// tellLane lets an ordering lane that started this run move on to the key's
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
		var s contract.ReplaySignal
		c.Receive(ctx, &s)
		r.status.LastReplayReason = s.Reason
		got = contract.SignalReplay
	})
	sel.AddReceive(discard, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		got = contract.SignalDiscard
	})
	window := r.in.ReplayWindow
	if window <= 0 {
		window = contract.DefaultReplayWindow
	}
	sel.AddFuture(workflow.NewTimer(tctx, window), func(workflow.Future) {})
	sel.Select(ctx)
	if got == "" {
		got = r.signalAtWindowEnd(ctx, replay, discard)
	}
	// Replay signals sent while this one was pending (a CLI signal and a bulk
	// replay, say) ask for the same thing; one replay answers them all.
	for replay.ReceiveAsync(nil) {
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
	var s contract.ReplaySignal
	if replay.ReceiveAsync(&s) {
		r.status.LastReplayReason = s.Reason
		return contract.SignalReplay
	}
	discard.ReceiveAsync(nil)
	return contract.SignalDiscard
}
