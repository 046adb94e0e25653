package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
)

// Rollout pacing.
const (
	// rolloutBatchFor is how long one ReplayFailing activity replays at
	// the rollout's rate (10 to 100 dead letters); the progress is counted
	// between batches.
	rolloutBatchFor = 5 * time.Second
	// rolloutReplayHeartbeat bounds how long a replay batch on a lost
	// worker goes unnoticed; its heartbeat says where a retry goes on.
	rolloutReplayHeartbeat = 10 * time.Second
	// rolloutSettleEvery is how often a rollout counts its events while
	// the replayed runs finish their schedules.
	rolloutSettleEvery = 5 * time.Second
	// rolloutSettleFor bounds that wait: a replayed run's schedule is
	// seconds to minutes, and a parked event waits for its head.
	rolloutSettleFor = 30 * time.Minute
	// rolloutCheckFor bounds the check (up to MaxRolloutLimit events and
	// 200,000 runs listed); it heartbeats every few seconds, so a lost
	// worker is noticed after rolloutCheckHeartbeat, not at the bound.
	rolloutCheckFor       = 30 * time.Minute
	rolloutCheckHeartbeat = 30 * time.Second
)

// Change IDs of the rollout workflow.
const (
	// changeRolloutContinueAsNew lets a rollout continue as new, carrying
	// its progress, when the server suggests it.
	changeRolloutContinueAsNew = "rollout-continue-as-new"
	// changeRolloutCountEvery counts the affected events at most every
	// rolloutSettleEvery while replaying.
	changeRolloutCountEvery = "rollout-count-every"
)

// ProjectionRolloutWorkflow rolls a fixed projection out as one operation:
// it checks the candidate against the events failing now (nothing
// written), stops there if too many would still fail, deploys it, replays
// the dead letters the check says it applies, in order and at the input's
// rate, and counts the affected events as they apply or fail again. It
// stops by itself when the share failing again passes MaxFailing, and can
// be cancelled; its progress is its query, its current details and three
// search attributes. Its ID (contract.RolloutWorkflowID) makes a second
// start of the same rollout find this one once it is done; a stopped or
// cancelled one ends as a failure, and may be started again.
func ProjectionRolloutWorkflow(ctx workflow.Context, in contract.RolloutInput) (contract.RolloutProgress, error) {
	r := &rolloutRun{in: in, id: workflow.GetInfo(ctx).WorkflowExecution.ID,
		p: contract.RolloutProgress{State: contract.RolloutChecking, Projection: in.Projection, Version: in.Version}}
	if err := workflow.SetQueryHandler(ctx, contract.QueryRolloutProgress, func() (contract.RolloutProgress, error) { return r.p, nil }); err != nil {
		return r.p, err
	}
	r.show(ctx)
	err := r.run(ctx)
	if temporal.IsCanceledError(err) || errors.Is(err, workflow.ErrCanceled) {
		// Cancelled: record where it stopped, then end as cancelled.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		r.p.State, r.p.Reason = contract.RolloutCancelled, "cancelled by an operator: replays sent so far stand, the rest were not sent"
		r.show(dctx)
		return r.p, err
	}
	return r.p, err
}

type rolloutRun struct {
	in contract.RolloutInput
	id string
	p  contract.RolloutProgress
}

func (r *rolloutRun) run(ctx workflow.Context) error {
	var dep contract.DeployCandidateResult
	var since time.Time
	after := 0
	var settleUntil *time.Time
	if res := r.in.Resume; res != nil {
		// A run continued as new: checked and deployed already.
		r.p, dep, since, after, settleUntil = res.Progress, res.Deployed, res.Since, res.After, res.SettleUntil
		r.show(ctx)
	} else {
		var err error
		if dep, err = r.checkAndDeploy(ctx); err != nil || !r.p.Deployed {
			return err
		}
		// Failing again is counted from the deploy, or from this run's
		// start when the candidate was deployed before it (a rerun, a
		// deploy by hand): the dead letters since that deploy are the
		// ones to replay.
		since = dep.DeployedAt
		if start := workflow.GetInfo(ctx).WorkflowStartTime; start.After(since) {
			since = start
		}
	}
	// A rollout continues as new when the server suggests it (a long or
	// slow rollout: each batch is a few events), carrying its progress.
	canContinue := workflow.GetVersion(ctx, changeRolloutContinueAsNew, workflow.DefaultVersion, 1) >= 1
	// Counting reads every affected event (up to MaxRolloutLimit) and the
	// ledger: while replaying it runs at most every rolloutSettleEvery, not
	// after every batch (at --rate 1,000, ten times a second).
	countEvery := rolloutSettleEvery
	if workflow.GetVersion(ctx, changeRolloutCountEvery, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		countEvery = 0
	}
	var lastCount time.Time
	continueAsNew := func() error {
		in := r.in
		in.Resume = &contract.RolloutResume{Progress: r.p, After: after, Deployed: dep, Since: since, SettleUntil: settleUntil}
		return workflow.NewContinueAsNewError(ctx, ProjectionRolloutWorkflow, in)
	}

	batch := min(max(int(r.in.Rate*rolloutBatchFor.Seconds()), 10), 100)
	perBatch := time.Duration(float64(batch)/max(r.in.Rate, 0.1)*float64(time.Second)) + time.Minute
	replay := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: perBatch,
		HeartbeatTimeout:    rolloutReplayHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: time.Minute},
	})
	count := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: time.Minute},
	})
	var superseded int
	counted := func() (bool, error) {
		var c contract.SettledCount
		in := contract.CountSettledInput{RolloutID: r.id, Projection: r.in.Projection, DeployedAt: since, Version: dep.Version}
		if err := workflow.ExecuteActivity(count, contract.CountSettledActivity, in).Get(ctx, &c); err != nil {
			return false, err
		}
		r.p.Applied, r.p.Failing, r.p.Pending = c.Applied, c.Failing, c.Pending
		r.p.Replayed += c.Replayed
		r.show(ctx)
		superseded = c.Superseded
		return superseded > 0 || share(c.Failing, r.p.WouldApply) > r.in.MaxFailing, nil
	}
	stopOver := func(when string) error {
		if superseded > 0 {
			return r.stop(ctx, fmt.Sprintf("version %d of %s was deployed by someone else during the rollout: the replays sent so far stand, the rest were not sent.",
				superseded, r.in.Projection), nil)
		}
		return r.overThreshold(ctx, when)
	}
	if settleUntil == nil {
		r.p.State = contract.RolloutReplaying
		r.show(ctx)
		for {
			var rr contract.ReplayFailingResult
			in := contract.ReplayFailingInput{RolloutID: r.id, After: after, Batch: batch, Rate: r.in.Rate, Identity: r.in.Identity, Reason: r.in.Reason}
			if err := workflow.ExecuteActivity(replay, contract.ReplayFailingActivity, in).Get(ctx, &rr); err != nil {
				return err
			}
			r.p.Replayed += rr.Replayed
			after = rr.Next
			if now := workflow.Now(ctx); rr.Done || now.Sub(lastCount) >= countEvery {
				lastCount = now
				over, err := counted()
				if err != nil {
					return err
				}
				if over {
					return stopOver("while replaying: the dead letters not replayed yet were left as they are")
				}
			} else {
				// The replayed count, in the details only: an upsert of the
				// unchanged search attributes would only lengthen history.
				r.p.UpdatedAt = workflow.Now(ctx).UTC()
				workflow.SetCurrentDetails(ctx, r.p.CurrentDetails())
			}
			if rr.Done {
				break
			}
			if canContinue && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				return continueAsNew()
			}
		}
		until := workflow.Now(ctx).Add(rolloutSettleFor)
		settleUntil = &until
	}

	r.p.State = contract.RolloutSettling
	r.show(ctx)
	for r.p.Pending > 0 && workflow.Now(ctx).Before(*settleUntil) {
		if canContinue && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return continueAsNew()
		}
		if err := workflow.Sleep(ctx, rolloutSettleEvery); err != nil {
			return err
		}
		over, err := counted()
		if err != nil {
			return err
		}
		if over {
			return stopOver("after the replays")
		}
	}
	r.p.State = contract.RolloutDone
	if r.p.Pending > 0 {
		r.p.Reason = fmt.Sprintf("%d affected events had not settled after %s: they apply (or fail) on their own schedules", r.p.Pending, rolloutSettleFor)
	}
	r.show(ctx)
	return nil
}

// checkAndDeploy checks the candidate and, unless too many of the affected
// events would still fail (the rollout stops; r.p.Deployed stays false),
// deploys it.
func (r *rolloutRun) checkAndDeploy(ctx workflow.Context) (contract.DeployCandidateResult, error) {
	var dep contract.DeployCandidateResult
	check := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: rolloutCheckFor,
		HeartbeatTimeout:    rolloutCheckHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{contract.InvalidCandidateType}},
	})
	var chk contract.CheckCandidateResult
	if err := workflow.ExecuteActivity(check, contract.CheckCandidateActivity, r.id, r.in).Get(ctx, &chk); err != nil {
		return dep, r.stop(ctx, fmt.Sprintf("the check failed: %v", err), err)
	}
	r.p.Affected, r.p.WouldApply, r.p.WouldFail, r.p.OutOfOrder = chk.Affected, chk.WouldApply, chk.WouldFail, chk.OutOfOrder
	if share(chk.WouldFail, chk.Affected) > r.in.MaxFailing {
		return dep, r.stop(ctx, fmt.Sprintf("%d of %d affected events (%.0f%%) still fail with the candidate, more than the %.0f%% allowed: nothing was deployed.\n\n%s",
			chk.WouldFail, chk.Affected, 100*share(chk.WouldFail, chk.Affected), 100*r.in.MaxFailing, chk.Summary), nil)
	}

	r.p.State = contract.RolloutDeploying
	r.show(ctx)
	deploy := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 10, NonRetryableErrorTypes: []string{contract.InvalidCandidateType}},
	})
	if err := workflow.ExecuteActivity(deploy, contract.DeployCandidateActivity, r.in).Get(ctx, &dep); err != nil {
		return dep, r.stop(ctx, fmt.Sprintf("the deploy failed: %v", err), err)
	}
	r.p.Deployed, r.p.Version = true, dep.Version
	r.p.Pending = r.p.WouldApply // until the first count
	return dep, nil
}

func (r *rolloutRun) overThreshold(ctx workflow.Context, when string) error {
	return r.stop(ctx, fmt.Sprintf("%d of the %d events the candidate was to fix failed again (%.0f%%, more than the %.0f%% allowed) %s.",
		r.p.Failing, r.p.WouldApply, 100*share(r.p.Failing, r.p.WouldApply), 100*r.in.MaxFailing, when), nil)
}

// stop ends the rollout as stopped with reason: as a failure (type
// contract.RolloutStoppedType, the progress as its details), which the UI
// shows as such and after which the same rollout may be started again.
func (r *rolloutRun) stop(ctx workflow.Context, reason string, err error) error {
	if temporal.IsCanceledError(err) {
		return err
	}
	r.p.State, r.p.Reason = contract.RolloutStopped, reason
	r.show(ctx)
	return temporal.NewNonRetryableApplicationError(reason, contract.RolloutStoppedType, err, r.p)
}

// show publishes the progress: current details and search attributes.
func (r *rolloutRun) show(ctx workflow.Context) {
	r.p.UpdatedAt = workflow.Now(ctx).UTC()
	workflow.SetCurrentDetails(ctx, r.p.CurrentDetails())
	// A failed upsert only leaves the list's columns stale; the query and
	// the details stay right.
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		contract.AttrProjection.ValueSet(r.in.Projection),
		contract.AttrRolloutAffected.ValueSet(int64(r.p.Affected)),
		contract.AttrRolloutApplied.ValueSet(int64(r.p.Applied)),
		contract.AttrRolloutFailing.ValueSet(int64(r.failing())))
}

// failing is what still fails: the check's count until the deploy, then
// the events that failed again after it.
func (r *rolloutRun) failing() int {
	if !r.p.Deployed {
		return r.p.WouldFail
	}
	return r.p.Failing
}

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
