package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/workflows"
)

// TestReplayRecordedHistories replays histories recorded from a real server
// (see worker's end-to-end tests, -record-histories), so a change that makes
// the workflow non-deterministic fails here before it reaches running workflows.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in workflows/testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: contract.RetryWorkflowName})
			r.RegisterWorkflowWithOptions(workflows.ProjectionIncidentWorkflow, workflow.RegisterOptions{Name: contract.IncidentWorkflowName})
			r.RegisterWorkflowWithOptions(workflows.ProjectionRolloutWorkflow, workflow.RegisterOptions{Name: contract.RolloutWorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}

// replayedStatus replays a recorded retry workflow history and returns the
// result the current code computes from it.
func replayedStatus(t *testing.T, file string) contract.Status {
	t.Helper()
	c := &captureStatus{}
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{c},
	})
	require.NoError(t, err)
	r.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: contract.RetryWorkflowName})
	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", file)))
	require.True(t, c.done, "the workflow returned")
	return c.status
}

type captureStatus struct {
	interceptor.WorkerInterceptorBase
	status contract.Status
	done   bool
}

func (c *captureStatus) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &captureStatusInbound{c: c}
	i.Next = next
	return i
}

type captureStatusInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	c *captureStatus
}

func (i *captureStatusInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := i.Next.ExecuteWorkflow(ctx, in)
	if st, ok := res.(contract.Status); ok {
		i.c.status, i.c.done = st, true
	}
	return res, err
}

// On a real server, with the worker away while the replay window ended, the
// window's timer and a replay signal the server accepted arrive in one
// workflow task (replay_at_window_end.json): the replay runs.
func TestReplayAtWindowEndRuns(t *testing.T) {
	s := replayedStatus(t, "replay_at_window_end.json")
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, 1, s.ReplayCount)
	require.Equal(t, "fixed as the window ended", s.LastReplayReason)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, 1, s.Attempts[1].Run)
	require.Empty(t, s.Attempts[1].Error)
}

// A run that closed as expired with such a signal pending, before the
// signal was honoured, still replays the same way.
func TestReplayAtWindowEndUnversioned(t *testing.T) {
	s := replayedStatus(t, "replay_at_window_end_unversioned.json")
	require.Equal(t, contract.StateDeadLettered, s.State)
	require.Zero(t, s.ReplayCount)
}

// On a real server the last attempt overran its StartToClose timeout
// (last_attempt_timed_out.json): the timeout carries the activity's last
// heartbeat, and its cause is attempt 1's failure.
func TestReplayLastAttemptTimedOut(t *testing.T) {
	s := replayedStatus(t, "last_attempt_timed_out.json")
	require.Equal(t, contract.StateDiscarded, s.State)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, 1, s.Attempts[0].Number)
	require.Equal(t, "sql", s.Attempts[0].ErrorKind)
	require.Contains(t, s.Attempts[0].Error, `column "followed_at"`)
	require.Equal(t, 2, s.Attempts[1].Number)
	require.Equal(t, "sql", s.Attempts[1].ErrorKind)
	require.Equal(t, "attempt timed out after 1m0s", s.Attempts[1].Error)
	require.False(t, s.Attempts[1].StartedAt.IsZero())
}

// Recorded from the bulk replay on a real server (batch_replayed.json: a
// dead letter with its memo, replayed by `temporal workflow signal --query`
// with an identity and reason in the payload): the replay is attributed.
func TestReplayBatchReplayed(t *testing.T) {
	s := replayedStatus(t, "batch_replayed.json")
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, 1, s.ReplayCount)
	require.NotNil(t, s.LastAction)
	require.Equal(t, "replay", s.LastAction.Action)
	require.Equal(t, "alice@ops", s.LastAction.Identity)
	require.Equal(t, "IR v2 drops followed_at", s.LastAction.Reason)
}

// A run held by an incident before the hold-without-slot change waited in
// one AwaitIncidentEnded activity (held_until_incident_end_unversioned.json,
// recorded from that code): it still replays under today's code, which
// keeps that path for it, and ends as it did.
func TestReplayOfAHoldAwaitedInOneActivity(t *testing.T) {
	s := replayedStatus(t, "held_until_incident_end_unversioned.json")
	require.Equal(t, contract.StateSucceeded, s.State)
	require.NotEmpty(t, s.Attempts)
}
