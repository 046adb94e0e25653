package activities_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

// describeAnswer is one answer of a scriptedDescriber: an error, or a
// workflow with a status and a CausetRetryState.
type describeAnswer struct {
	err    error
	status enumspb.WorkflowExecutionStatus
	state  contract.State
}

// scriptedDescriber answers each DescribeWorkflowExecution with the next
// answer (the last one repeats).
type scriptedDescriber struct {
	t       *testing.T
	mu      sync.Mutex
	answers []describeAnswer
	calls   []string
}

func (d *scriptedDescriber) DescribeWorkflowExecution(_ context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Empty(d.t, runID, "the latest run is described")
	d.calls = append(d.calls, id)
	a := d.answers[0]
	if len(d.answers) > 1 {
		d.answers = d.answers[1:]
	}
	if a.err != nil {
		return nil, a.err
	}
	info := &workflowpb.WorkflowExecutionInfo{Status: a.status}
	if a.state != "" {
		p, err := converter.GetDefaultDataConverter().ToPayload(string(a.state))
		require.NoError(d.t, err)
		info.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{contract.AttrRetryState.GetName(): p}}
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}, nil
}

func running(state contract.State) describeAnswer {
	return describeAnswer{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, state: state}
}

// awaitSettled runs AwaitRetrySettled on workflowID with d and returns the
// harness, how long it took and its error.
func awaitSettled(t *testing.T, d *scriptedDescriber, workflowID string) (*harness, time.Duration, error) {
	t.Helper()
	h := newHarness(t, nil, nil)
	h.acts.Workflows = d
	start := time.Now()
	_, err := h.env.ExecuteActivity(contract.AwaitRetrySettledActivity, workflowID)
	return h, time.Since(start), err
}

// The activity polls the retry workflow until it has settled, heartbeating
// between polls, and returns nil then.
func TestAwaitRetrySettledPollsUntilSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []describeAnswer
		polls   int
	}{
		{"no such workflow", []describeAnswer{{err: serviceerror.NewNotFound("workflow not found")}}, 1},
		{"already completed", []describeAnswer{{status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, state: contract.StateSucceeded}}, 1},
		{"retrying, replaying, then dead-lettered", []describeAnswer{running(contract.StateRetrying), running(contract.StateReplaying), running(contract.StateDeadLettered)}, 3},
		{"state not set yet, then terminated", []describeAnswer{running(""), {status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, state: contract.StateRetrying}}, 2},
		{"retrying, then discarded", []describeAnswer{running(contract.StateRetrying), running(contract.StateDiscarded)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := contract.RetryWorkflowID(projectionName, "production", "head")
			d := &scriptedDescriber{t: t, answers: tc.answers}
			h, took, err := awaitSettled(t, d, id)
			require.NoError(t, err)
			require.Len(t, d.calls, tc.polls)
			for _, c := range d.calls {
				require.Equal(t, id, c)
			}
			// A heartbeat every 500ms while it waits; the describes back off
			// from 500ms, doubling.
			require.GreaterOrEqual(t, h.hb.count(), tc.polls-1)
			want := time.Duration(0)
			for i := range tc.polls - 1 {
				want += 500 * time.Millisecond << i
			}
			require.GreaterOrEqual(t, took, want*9/10)
		})
	}
}

// A workflow that cannot be described is not taken as settled: the activity
// logs it and polls on.
func TestAwaitRetrySettledPollsOnThroughDescribeErrors(t *testing.T) {
	d := &scriptedDescriber{t: t, answers: []describeAnswer{
		{err: serviceerror.NewUnavailable("frontend restarting")},
		{err: errors.New("connection reset")},
		running(contract.StateDeadLettered),
	}}
	h, _, err := awaitSettled(t, d, "projection-retry:p:f:e")
	require.NoError(t, err)
	require.Len(t, d.calls, 3)
	require.GreaterOrEqual(t, h.hb.count(), 2)
	var logged []string
	for _, line := range h.logs.lines(t) {
		require.Equal(t, "cannot describe the retry workflow a lane waits for; polling on", line["msg"])
		require.Equal(t, "DEBUG", line["level"])
		require.Equal(t, "projection-retry:p:f:e", line["workflowId"])
		logged = append(logged, line["err"].(string))
	}
	require.Len(t, logged, 2)
	require.Contains(t, logged[0], "frontend restarting")
	require.Equal(t, "connection reset", logged[1])
}

// Workflows used to drive AwaitRetrySettled on a real Temporal server.
const (
	targetWorkflowName = "ActivitiesTestRetryTarget"
	waiterWorkflowName = "ActivitiesTestLaneWaiter"
	signalSettle       = "settle"
	signalStop         = "stop"
)

// targetWorkflow stands for a retry workflow: it starts with the
// CausetRetryState search attribute set (retrying), moves to dead_lettered
// on signalSettle and then stays open, as a dead-lettered run waiting for a
// replay does.
func targetWorkflow(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, signalSettle).Receive(ctx, nil)
	if err := workflow.UpsertTypedSearchAttributes(ctx, contract.AttrRetryState.ValueSet(string(contract.StateDeadLettered))); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// waiterWorkflow runs AwaitRetrySettled on target as a lane does, and
// cancels it on signalStop. It returns "settled" or "canceled".
func waiterWorkflow(ctx workflow.Context, target string) (string, error) {
	actx, cancel := workflow.WithCancel(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    2 * time.Second,
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}))
	f := workflow.ExecuteActivity(actx, contract.AwaitRetrySettledActivity, target)
	stop := workflow.GetSignalChannel(ctx, signalStop)
	workflow.Go(ctx, func(ctx workflow.Context) {
		stop.Receive(ctx, nil)
		cancel()
	})
	err := f.Get(ctx, nil)
	switch {
	case err == nil:
		return "settled", nil
	case temporal.IsCanceledError(err):
		return "canceled", nil
	}
	return "", err
}

// AwaitRetrySettled on a real server, through the worker's own client
// (Activities.Workflows unset): it waits while the retry workflow retries,
// heartbeating (its heartbeat timeout is shorter than the wait), returns once
// the workflow is dead-lettered though still open, returns at once for a
// workflow that does not exist, and stops when its lane cancels it.
func TestAwaitRetrySettledOnTemporal(t *testing.T) {
	srv := testenv.Temporal(t)
	tq := testenv.TaskQueue(t)
	w := sdkworker.New(srv.Client, tq, sdkworker.Options{})
	a := &activities.Activities{Logger: slog.New(slog.DiscardHandler)}
	w.RegisterActivityWithOptions(a.AwaitRetrySettled, activity.RegisterOptions{Name: contract.AwaitRetrySettledActivity})
	w.RegisterWorkflowWithOptions(targetWorkflow, workflow.RegisterOptions{Name: targetWorkflowName})
	w.RegisterWorkflowWithOptions(waiterWorkflow, workflow.RegisterOptions{Name: waiterWorkflowName})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	startTarget := func(id string) {
		t.Helper()
		_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq,
			TypedSearchAttributes: temporal.NewSearchAttributes(contract.AttrRetryState.ValueSet(string(contract.StateRetrying)))}, targetWorkflowName)
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Client.TerminateWorkflow(context.Background(), id, "", "test over") })
	}
	startWaiter := func(id, target string) client.WorkflowRun {
		t.Helper()
		run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, waiterWorkflowName, target)
		require.NoError(t, err)
		return run
	}
	result := func(run client.WorkflowRun) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var s string
		require.NoError(t, run.Get(rctx, &s))
		return s
	}
	status := func(id string) enumspb.WorkflowExecutionStatus {
		t.Helper()
		d, err := srv.DescribeWorkflow(id)
		require.NoError(t, err)
		return d.GetWorkflowExecutionInfo().GetStatus()
	}

	t.Run("waits until the retry workflow is dead-lettered", func(t *testing.T) {
		target := tq + "-target-settles"
		startTarget(target)
		waiter := startWaiter(tq+"-waiter-settles", target)
		// Longer than the heartbeat timeout: an activity that did not
		// heartbeat while it waits would time out here.
		time.Sleep(3500 * time.Millisecond)
		d, err := srv.DescribeWorkflow(waiter.GetID())
		require.NoError(t, err)
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus(), "the lane still waits")
		require.Len(t, d.GetPendingActivities(), 1)
		pa := d.GetPendingActivities()[0]
		require.Equal(t, contract.AwaitRetrySettledActivity, pa.GetActivityType().GetName())
		require.EqualValues(t, 1, pa.GetAttempt(), "the first attempt is still running")
		require.NotNil(t, pa.GetLastHeartbeatTime(), "the waiting activity heartbeats")

		require.NoError(t, srv.Client.SignalWorkflow(ctx, target, "", signalSettle, nil))
		require.Equal(t, "settled", result(waiter))
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, status(target), "dead-lettered is settled though still open")
	})

	t.Run("returns at once for a workflow that does not exist", func(t *testing.T) {
		start := time.Now()
		waiter := startWaiter(tq+"-waiter-missing", tq+"-never-started")
		require.Equal(t, "settled", result(waiter))
		require.Less(t, time.Since(start), 10*time.Second)
	})

	t.Run("stops when the lane cancels it", func(t *testing.T) {
		target := tq + "-target-never-settles"
		startTarget(target)
		waiter := startWaiter(tq+"-waiter-canceled", target)
		time.Sleep(time.Second)
		require.NoError(t, srv.Client.SignalWorkflow(ctx, waiter.GetID(), "", signalStop, nil))
		require.Equal(t, "canceled", result(waiter), "the activity saw the cancellation through its heartbeat and returned")
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, status(target))
	})
}
