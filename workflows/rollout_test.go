package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/workflows"
)

// rolloutEnv runs the rollout workflow on stand-in activities: check says
// chk, replays go in batches of replay, and count answers counts in turn
// (the last one again once they run out).
type rolloutEnv struct {
	env      *testsuite.TestWorkflowEnvironment
	deployed int
	batches  []contract.ReplayFailingInput
	counts   []contract.SettledCount
	counted  int
}

func newRolloutEnv(t *testing.T, chk contract.CheckCandidateResult, replay func(in contract.ReplayFailingInput) contract.ReplayFailingResult, counts ...contract.SettledCount) *rolloutEnv {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	r := &rolloutEnv{env: s.NewTestWorkflowEnvironment(), counts: counts}
	r.env.RegisterWorkflowWithOptions(workflows.ProjectionRolloutWorkflow, workflow.RegisterOptions{Name: contract.RolloutWorkflowName})
	r.env.RegisterActivityWithOptions(func(context.Context, string, contract.RolloutInput) (contract.CheckCandidateResult, error) {
		return chk, nil
	}, activity.RegisterOptions{Name: contract.CheckCandidateActivity})
	r.env.RegisterActivityWithOptions(func(context.Context, contract.RolloutInput) (contract.DeployCandidateResult, error) {
		r.deployed++
		return contract.DeployCandidateResult{Version: 2, DeployedAt: time.Now()}, nil
	}, activity.RegisterOptions{Name: contract.DeployCandidateActivity})
	r.env.RegisterActivityWithOptions(func(_ context.Context, in contract.ReplayFailingInput) (contract.ReplayFailingResult, error) {
		r.batches = append(r.batches, in)
		return replay(in), nil
	}, activity.RegisterOptions{Name: contract.ReplayFailingActivity})
	r.env.RegisterActivityWithOptions(func(context.Context, contract.CountSettledInput) (contract.SettledCount, error) {
		c := r.counts[min(r.counted, len(r.counts)-1)]
		r.counted++
		return c, nil
	}, activity.RegisterOptions{Name: contract.CountSettledActivity})
	return r
}

func (r *rolloutEnv) run(t *testing.T) (contract.RolloutProgress, error) {
	t.Helper()
	return r.runInput(t, contract.RolloutInput{Projection: "artist_stats", Version: 2, MaxFailing: 0.1, Rate: 100, Limit: 1000})
}

func (r *rolloutEnv) runInput(t *testing.T, in contract.RolloutInput) (contract.RolloutProgress, error) {
	t.Helper()
	r.env.ExecuteWorkflow(contract.RolloutWorkflowName, in)
	require.True(t, r.env.IsWorkflowCompleted())
	var p contract.RolloutProgress
	err := r.env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == contract.RolloutStoppedType {
		require.NoError(t, appErr.Details(&p))
		return p, err
	}
	if err == nil {
		require.NoError(t, r.env.GetWorkflowResult(&p))
	}
	return p, err
}

// in batches: 250 dead letters go as 100, 100, 50.
func inBatches(total int) func(in contract.ReplayFailingInput) contract.ReplayFailingResult {
	return func(in contract.ReplayFailingInput) contract.ReplayFailingResult {
		n := min(in.Batch, total-in.After)
		return contract.ReplayFailingResult{Next: in.After + n, Replayed: n, Done: in.After+n >= total}
	}
}

func TestRolloutReplaysInBatchesThenWaitsForTheEventsToSettle(t *testing.T) {
	r := newRolloutEnv(t, contract.CheckCandidateResult{Affected: 260, WouldApply: 255, WouldFail: 5, ToReplay: 250}, inBatches(250),
		contract.SettledCount{Applied: 100, Pending: 155}, contract.SettledCount{Applied: 200, Pending: 55},
		contract.SettledCount{Applied: 240, Pending: 15}, contract.SettledCount{Applied: 254, Failing: 1})
	p, err := r.run(t)
	require.NoError(t, err)
	require.Equal(t, contract.RolloutDone, p.State)
	require.Equal(t, 1, r.deployed)
	require.Len(t, r.batches, 3)
	require.Equal(t, []int{0, 100, 200}, []int{r.batches[0].After, r.batches[1].After, r.batches[2].After}, "in order, each after the last")
	require.Equal(t, 250, p.Replayed)
	require.Equal(t, contract.RolloutProgress{State: contract.RolloutDone, Projection: "artist_stats", Version: 2, Deployed: true,
		Affected: 260, WouldApply: 255, WouldFail: 5, Replayed: 250, Applied: 254, Failing: 1, UpdatedAt: p.UpdatedAt}, p)
}

func TestRolloutStopsAtTheCheckWithoutDeploying(t *testing.T) {
	r := newRolloutEnv(t, contract.CheckCandidateResult{Affected: 10, WouldApply: 5, WouldFail: 5, Summary: "…"}, inBatches(5), contract.SettledCount{})
	p, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, contract.RolloutStopped, p.State)
	require.False(t, p.Deployed)
	require.Zero(t, r.deployed)
	require.Empty(t, r.batches)
	require.Contains(t, p.Reason, "5 of 10 affected events (50%) still fail")
}

// Replayed events that fail again past the share stop the rollout: the
// dead letters after them are not replayed.
func TestRolloutStopsWhenReplayedEventsFailAgain(t *testing.T) {
	r := newRolloutEnv(t, contract.CheckCandidateResult{Affected: 300, WouldApply: 300, ToReplay: 300}, inBatches(300),
		contract.SettledCount{Applied: 60, Failing: 40, Pending: 200})
	p, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, contract.RolloutStopped, p.State)
	require.True(t, p.Deployed)
	require.Len(t, r.batches, 1, "stopped after the first batch")
	require.Contains(t, p.Reason, "40 of the 300 events the candidate was to fix failed again")
}

func TestRolloutCancelled(t *testing.T) {
	r := newRolloutEnv(t, contract.CheckCandidateResult{Affected: 10, WouldApply: 10, ToReplay: 10}, inBatches(10),
		contract.SettledCount{Applied: 5, Pending: 5})
	r.env.RegisterDelayedCallback(func() { r.env.CancelWorkflow() }, 30*time.Second)
	_, err := r.run(t)
	require.True(t, temporal.IsCanceledError(err), "%v", err)
	v, qerr := r.env.QueryWorkflow(contract.QueryRolloutProgress)
	require.NoError(t, qerr)
	var p contract.RolloutProgress
	require.NoError(t, v.Get(&p))
	require.Equal(t, contract.RolloutCancelled, p.State)
	require.Equal(t, 10, p.Replayed)
}

// A rollout whose history grows long (the server suggests it) continues as
// new after a batch, carrying its progress; the next run neither checks nor
// deploys again, replays after the last dead letter replayed, and ends.
func TestRolloutContinuesAsNewWithItsProgress(t *testing.T) {
	chk := contract.CheckCandidateResult{Affected: 260, WouldApply: 255, WouldFail: 5, ToReplay: 250}
	r := newRolloutEnv(t, chk, inBatches(250), contract.SettledCount{Applied: 90, Pending: 165})
	r.env.SetContinueAsNewSuggested(true)
	_, err := r.run(t)
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	var in contract.RolloutInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
	require.NotNil(t, in.Resume)
	require.Equal(t, 100, in.Resume.After, "after the first batch")
	require.Equal(t, 100, in.Resume.Progress.Replayed)
	require.Equal(t, 90, in.Resume.Progress.Applied)
	require.Equal(t, 2, in.Resume.Deployed.Version)
	require.Nil(t, in.Resume.SettleUntil)
	require.Len(t, r.batches, 1)
	require.Equal(t, 1, r.deployed)

	next := newRolloutEnv(t, contract.CheckCandidateResult{}, inBatches(250),
		contract.SettledCount{Applied: 200, Pending: 55}, contract.SettledCount{Applied: 254, Failing: 1})
	p, err := next.runInput(t, in)
	require.NoError(t, err)
	require.Equal(t, contract.RolloutDone, p.State)
	require.Zero(t, next.deployed, "not deployed again")
	require.Equal(t, []int{100, 200}, []int{next.batches[0].After, next.batches[1].After}, "on after the last replayed")
	require.Equal(t, 250, p.Replayed)
	require.Equal(t, 260, p.Affected, "the check's counts carried")
	require.Equal(t, 254, p.Applied)
}
