package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
)

// ProjectionIncidentWorkflow is one systemic failure of a projection: the
// bridges open it when one failure fingerprint reaches the threshold of
// distinct events, and report the events it affects by signal. It probes
// with its sample event on the seed's backoff (capped at the retry max),
// at once when the projection's IR is deployed, until a probe succeeds or
// an operator signals resolve or dead-letter-all.
//
// Under policy hold the incident's events are parked by the bridges, and
// its state is kept in causet_incidents: moving it to releasing (or
// dead_lettered) lets the bridges apply (or dead-letter) the parked events
// in entity order; the workflow completes once none is left. The hold is
// this workflow's own state and the database's, never a paused activity.
func ProjectionIncidentWorkflow(ctx workflow.Context, in contract.IncidentInput) (contract.IncidentStatus, error) {
	w := &incidentRun{in: in}
	if in.Status != nil {
		w.st = *in.Status
		// A run restarted while its row dead-letters the held events
		// finishes that.
		w.deadLetterAll = w.st.State == contract.IncidentDeadLettering
	} else {
		now := workflow.Now(ctx).UTC()
		w.st = contract.IncidentStatus{
			State: contract.IncidentOpen, Projection: in.Projection, Fingerprint: in.Fingerprint, Policy: in.Policy,
			ErrorKind: in.ErrorKind, SQLState: in.SQLState, Error: in.Error, Pattern: in.Pattern,
			FirstSeen: now, LastSeen: now,
		}
		if in.Policy == config.IncidentHold {
			w.st.State = contract.IncidentHolding
		}
	}
	if err := workflow.SetQueryHandler(ctx, contract.QueryStatus, func() (contract.IncidentStatus, error) { return w.st, nil }); err != nil {
		return w.st, err
	}
	w.upsertState(ctx)
	if !w.st.State.Settled() && w.st.ResolvedAt == nil {
		if cont, err := w.probeUntilResolved(ctx); cont || err != nil {
			return w.st, err
		}
	}
	err := w.finish(ctx)
	// Failures reported while the incident closed still count.
	reopened := w.takeFailures(ctx) > 0
	if err == nil && reopened && w.held() && workflow.GetVersion(ctx, changeIncidentTakesOverReopen, workflow.DefaultVersion, 1) >= 1 {
		// A bridge reported failures after the row's final move: it may have
		// reopened the row (a new hold) and found this run still open, so
		// signalled it instead of starting one. This run takes the new hold
		// over, explicitly: it continues as new from the row.
		var next *contract.IncidentInput
		o := incidentStateActivity
		o.Summary = "did a bridge reopen the incident's row? (a new hold)"
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), contract.IncidentRestartActivity, w.id()).Get(ctx, &next); err != nil {
			return w.st, err
		}
		if next != nil {
			workflow.GetLogger(ctx).Info("the incident's row reopened as a new hold: this run takes it over", "state", string(next.Status.State))
			return w.st, workflow.NewContinueAsNewError(ctx, ProjectionIncidentWorkflow, *next)
		}
	}
	return w.st, err
}

type incidentRun struct {
	in contract.IncidentInput
	st contract.IncidentStatus
	// deadLetterAll: an operator chose to dead-letter the held events.
	deadLetterAll bool
	// reports are the keys of the last failures reports counted, so that a
	// report sent again (its first send's answer lost) counts once.
	reports []string
}

// maxReportKeys bounds the report keys a run remembers: a bridge re-sends
// a report at its next flush, long before this many others arrive.
const maxReportKeys = 256

var incidentActivity = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 5},
}

// incidentStateActivity moves the incident's row: it is retried until it
// succeeds (a database outage at resolution only delays the release), as
// the DLQ publish is, for a failed move would leave the row holding with no
// run to move it.
var incidentStateActivity = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
}

// probeUntilResolved waits and probes until a probe succeeds or an operator
// decides. It returns cont when the run continued as new.
func (w *incidentRun) probeUntilResolved(ctx workflow.Context) (bool, error) {
	failures := workflow.GetSignalChannel(ctx, contract.SignalIncidentFailures)
	resolve := workflow.GetSignalChannel(ctx, contract.SignalResolve)
	deadLetterAll := workflow.GetSignalChannel(ctx, contract.SignalDeadLetterAll)
	deployed := workflow.GetSignalChannel(ctx, contract.SignalDeployed)
	delay := w.nextDelay()
	// The hold's deadline is armed once for the run; before this change it
	// was re-armed at every probe.
	var holdEnd workflow.Future
	if w.held() && w.in.HoldMax > 0 && workflow.GetVersion(ctx, changeHoldTimerOnce, workflow.DefaultVersion, 1) >= 1 {
		hctx, cancelHold := workflow.WithCancel(ctx)
		defer cancelHold()
		left := w.st.FirstSeen.Add(w.in.HoldMax).Sub(workflow.Now(ctx))
		holdEnd = workflow.NewTimerWithOptions(hctx, max(left, time.Millisecond), workflow.TimerOptions{
			Summary: "hold deadline: CAUSET_INCIDENT_HOLD_MAX=" + w.in.HoldMax.String()})
	}
	for {
		w.describe(ctx)
		wait, cancel := workflow.WithCancel(ctx)
		next := workflow.Now(ctx).Add(delay).UTC()
		w.st.NextProbeAt = &next
		timer := workflow.NewTimerWithOptions(wait, delay, workflow.TimerOptions{Summary: fmt.Sprintf("wait for probe %d", w.st.Probes+1)})
		probe, decided := false, false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { probe = true })
		sel.AddReceive(deployed, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			probe = true
		})
		sel.AddReceive(failures, func(c workflow.ReceiveChannel, _ bool) {
			var f contract.IncidentFailures
			c.Receive(ctx, &f)
			w.addFailures(f)
			w.describe(ctx)
			if w.held() && w.in.MaxHeld > 0 && w.st.EventsHeld >= w.in.MaxHeld {
				w.resolved(ctx, "max_held", fmt.Sprintf("held %d events, CAUSET_INCIDENT_MAX_HELD is %d", w.st.EventsHeld, w.in.MaxHeld))
				w.deadLetterAll = true
				decided = true
			}
		})
		holdMax := func(workflow.Future) {
			w.resolved(ctx, "hold_max", "held longer than CAUSET_INCIDENT_HOLD_MAX="+w.in.HoldMax.String())
			w.deadLetterAll = true
			decided = true
		}
		switch {
		case holdEnd != nil:
			sel.AddFuture(holdEnd, holdMax)
		case w.held() && w.in.HoldMax > 0:
			// A hold is bounded in time too: past it the held events are
			// dead-lettered, as the seed would have done at once.
			left := w.st.FirstSeen.Add(w.in.HoldMax).Sub(workflow.Now(ctx))
			sel.AddFuture(workflow.NewTimer(wait, max(left, time.Millisecond)), holdMax)
		}
		sel.AddReceive(resolve, func(c workflow.ReceiveChannel, _ bool) {
			var s contract.OperatorSignal
			c.Receive(ctx, &s)
			w.resolved(ctx, operatorName(s), s.Reason)
			decided = true
		})
		sel.AddReceive(deadLetterAll, func(c workflow.ReceiveChannel, _ bool) {
			var s contract.OperatorSignal
			c.Receive(ctx, &s)
			w.resolved(ctx, operatorName(s), s.Reason)
			w.deadLetterAll = true
			decided = true
		})
		for !probe && !decided {
			sel.Select(ctx)
		}
		cancel()
		w.st.NextProbeAt = nil
		if decided {
			return false, nil
		}
		var res contract.ProbeResult
		probeOpts := incidentActivity
		probeOpts.Summary = fmt.Sprintf("probe %d: try sample event %s, rolled back", w.st.Probes+1, w.in.Sample.EventID)
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, probeOpts), contract.ProbeIncidentActivity, w.in).Get(ctx, &res)
		now := workflow.Now(ctx).UTC()
		w.st.Probes++
		w.st.LastProbeAt = &now
		switch {
		case err != nil:
			w.st.LastProbeError = probeError(err)
		case res.OK:
			w.st.LastProbeError = ""
			reason := "the fix worked: the sample event applies"
			if res.OtherError != "" {
				reason = "the fix worked for this fingerprint: the sample event no longer fails with this incident's error " +
					"(it still fails for another reason, which its own retry workflow handles: " + res.OtherError + ")"
			}
			w.resolved(ctx, "probe", reason)
			return false, nil
		default:
			w.st.LastProbeError = res.Error
		}
		if !w.held() && w.in.QuietClose > 0 && now.Sub(w.st.LastSeen) >= w.in.QuietClose {
			// Informational, and nothing fails this way any more (or the
			// failing events stopped coming): it closes rather than probe on.
			w.resolved(ctx, "quiet", "no failure reported for "+w.in.QuietClose.String())
			return false, nil
		}
		delay = w.nextDelay()
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// Signals delivered while the probe ran sit in their channels, and
			// a new run does not get them: count the failures, and stay in
			// this run for a pending decision or deploy.
			w.takeFailures(ctx)
			if resolve.Len() > 0 || deadLetterAll.Len() > 0 || deployed.Len() > 0 {
				continue
			}
			in := w.in
			st := w.st
			in.Status = &st
			return true, workflow.NewContinueAsNewError(ctx, ProjectionIncidentWorkflow, in)
		}
	}
}

// nextDelay is the seed's backoff for the next probe: Initial, times
// Multiplier per probe made, capped at Max.
func (w *incidentRun) nextDelay() time.Duration {
	r := w.in.Retry
	if r.Initial <= 0 {
		r = config.DefaultRetry()
	}
	d := float64(r.Initial)
	for i := 0; i < w.st.Probes && d < float64(r.Max); i++ {
		d *= r.Multiplier
	}
	return min(time.Duration(d), r.Max)
}

// takeFailures counts the failures signals delivered but not received yet,
// and returns how many it received.
func (w *incidentRun) takeFailures(ctx workflow.Context) int {
	c := workflow.GetSignalChannel(ctx, contract.SignalIncidentFailures)
	for n := 0; ; n++ {
		var f contract.IncidentFailures
		if !c.ReceiveAsync(&f) {
			return n
		}
		w.addFailures(f)
	}
}

func (w *incidentRun) addFailures(f contract.IncidentFailures) {
	if f.Key != "" {
		if slices.Contains(w.reports, f.Key) {
			return
		}
		if len(w.reports) == maxReportKeys {
			w.reports = w.reports[1:]
		}
		w.reports = append(w.reports, f.Key)
	}
	w.st.EventsAffected += f.Events
	w.st.EventsHeld += f.Held
	if f.At.After(w.st.LastSeen) {
		w.st.LastSeen = f.At.UTC()
	}
	for _, id := range f.EventIDs {
		if len(w.st.SampleEventIDs) >= contract.MaxIncidentSamples {
			break
		}
		w.st.SampleEventIDs = append(w.st.SampleEventIDs, id)
	}
}

func (w *incidentRun) resolved(ctx workflow.Context, by, reason string) {
	now := workflow.Now(ctx).UTC()
	w.st.ResolvedAt = &now
	w.st.ResolvedBy = by
	w.st.Reason = reason
	w.describe(ctx)
}

// describe sets the incident's current details (answered from memory,
// nothing written to history).
func (w *incidentRun) describe(ctx workflow.Context) {
	workflow.SetCurrentDetails(ctx, w.st.CurrentDetails())
}

// probeError is a failed probe's error: the sample's own failure when the
// probe reports it as ProbeFailed, else the activity's error.
func probeError(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == contract.ProbeFailedType {
		var res contract.ProbeResult
		if appErr.HasDetails() && appErr.Details(&res) == nil && res.Error != "" {
			return res.Error
		}
	}
	return err.Error()
}

func operatorName(s contract.OperatorSignal) string {
	if s.Identity == "" {
		return "operator"
	}
	return s.Identity
}

// finish releases (or dead-letters) what the bridges hold and waits until
// none is left; under policy dead-letter there is nothing held.
func (w *incidentRun) finish(ctx workflow.Context) error {
	stateOpts := incidentActivity
	if workflow.GetVersion(ctx, "incident-state-until-done", workflow.DefaultVersion, 1) >= 1 {
		stateOpts = incidentStateActivity
	}
	moveTo := func(s contract.IncidentState) workflow.Context {
		o := stateOpts
		o.Summary = "move the incident's row to " + string(s)
		return workflow.WithActivityOptions(ctx, o)
	}
	next := contract.IncidentReleasing
	final := contract.IncidentResolved
	// Each move is a compare-and-set from the state this run left the row
	// in; a dead-letter-all drains in state dead_lettering, so that the row
	// cannot reopen (a new hold) until this run has drained its own.
	var nextFrom, finalFrom []contract.IncidentState
	if w.in.Policy == config.IncidentHold && workflow.GetVersion(ctx, changeIncidentMovesFrom, workflow.DefaultVersion, 1) >= 1 {
		nextFrom, finalFrom = []contract.IncidentState{contract.IncidentHolding}, []contract.IncidentState{contract.IncidentReleasing}
		if w.deadLetterAll {
			next, final = contract.IncidentDeadLettering, contract.IncidentDeadLettered
			finalFrom = []contract.IncidentState{contract.IncidentDeadLettering}
		}
	} else if w.deadLetterAll {
		next, final = contract.IncidentDeadLettered, contract.IncidentDeadLettered
	}
	if w.in.Policy == config.IncidentHold && w.st.CaughtUpAt == nil {
		w.st.State = next
		w.upsertState(ctx)
		if err := workflow.ExecuteActivity(moveTo(next), contract.SetIncidentStateActivity,
			contract.SetIncidentStateInput{ID: w.id(), State: next, From: nextFrom}).Get(ctx, nil); err != nil {
			return err
		}
		verb := "released"
		if w.deadLetterAll {
			verb = "dead-lettered"
		}
		wait := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 24 * time.Hour,
			HeartbeatTimeout:    30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
			Summary:             "wait until the bridges have " + verb + " every held event",
		})
		if err := workflow.ExecuteActivity(wait, contract.AwaitIncidentReleasedActivity, w.id()).Get(ctx, nil); err != nil {
			return err
		}
		now := workflow.Now(ctx).UTC()
		w.st.CaughtUpAt = &now
	}
	// Reports of this hold that came while it drained count before the
	// final move; one after it may be of a reopened row (the caller's).
	w.takeFailures(ctx)
	w.st.State = final
	w.upsertState(ctx)
	return workflow.ExecuteActivity(moveTo(final), contract.SetIncidentStateActivity,
		contract.SetIncidentStateInput{ID: w.id(), State: final, From: finalFrom}).Get(ctx, nil)
}

// held reports whether the incident's events are parked (policy hold).
func (w *incidentRun) held() bool { return w.in.Policy == config.IncidentHold }

func (w *incidentRun) id() string {
	return contract.IncidentWorkflowID(w.in.Projection, w.in.Fingerprint)
}

func (w *incidentRun) upsertState(ctx workflow.Context) {
	w.describe(ctx)
	// A failed upsert only leaves the search attribute stale; the status
	// query and the row stay right.
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		contract.AttrProjection.ValueSet(w.in.Projection),
		contract.AttrIncidentState.ValueSet(string(w.st.State)))
}
