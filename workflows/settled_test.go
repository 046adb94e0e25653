package workflows_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
)

func executionInfo(t *testing.T, status enumspb.WorkflowExecutionStatus, state contract.State) *workflowpb.WorkflowExecutionInfo {
	info := &workflowpb.WorkflowExecutionInfo{Status: status}
	if state != "" {
		p, err := converter.GetDefaultDataConverter().ToPayload(string(state))
		require.NoError(t, err)
		info.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			contract.AttrRetryState.GetName(): p,
		}}
	}
	return info
}

func TestRetrySettled(t *testing.T) {
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	for _, tc := range []struct {
		name string
		info *workflowpb.WorkflowExecutionInfo
		want bool
	}{
		{"no such workflow", nil, true},
		{"completed", executionInfo(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, contract.StateSucceeded), true},
		{"terminated while retrying", executionInfo(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, contract.StateRetrying), true},
		{"retrying", executionInfo(t, running, contract.StateRetrying), false},
		{"replaying", executionInfo(t, running, contract.StateReplaying), false},
		{"running, state not set yet", executionInfo(t, running, ""), false},
		{"dead-lettered, waiting for replay", executionInfo(t, running, contract.StateDeadLettered), true},
		{"discarded", executionInfo(t, running, contract.StateDiscarded), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, contract.Settled(tc.info))
		})
	}
}

// scriptedDescriber answers DescribeWorkflowExecution with one state per
// call (the last one repeats), or NotFound when it has none.
type scriptedDescriber struct {
	t      *testing.T
	mu     sync.Mutex
	states []contract.State
	calls  []string
}

func (d *scriptedDescriber) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, id)
	if len(d.states) == 0 {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	s := d.states[0]
	if len(d.states) > 1 {
		d.states = d.states[1:]
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: executionInfo(d.t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, s),
	}, nil
}

func (d *scriptedDescriber) callCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

func TestLaneWaitsForHeadStartedOutsideIt(t *testing.T) {
	h, o := newLaneHarness(t, nil)
	head := contract.RetryWorkflowID("artist_followers", "production", "head")
	d := &scriptedDescriber{t: t, states: []contract.State{contract.StateRetrying, contract.StateRetrying, contract.StateDeadLettered}}
	a := &activities.Activities{Workflows: d}
	h.env.RegisterActivityWithOptions(a.AwaitRetrySettled, activity.RegisterOptions{Name: contract.AwaitRetrySettledActivity})
	describedBeforeApply := -1
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == contract.ApplyProjectionActivity && describedBeforeApply < 0 {
			describedBeforeApply = d.callCount()
		}
	})
	var u *updateResult
	h.env.RegisterDelayedCallback(func() {
		in := laneEvent("e2", false)
		in.WaitFor = head
		u = enqueue(h, in)
	}, 0)
	h.env.ExecuteWorkflow(contract.LaneWorkflowName, laneInput())
	require.NoError(t, h.env.GetWorkflowError())
	require.True(t, u.accepted)
	require.Equal(t, []string{"e2"}, o.applied)
	require.Equal(t, 3, describedBeforeApply, "e2 ran only after the head was seen dead-lettered")
	require.Equal(t, []string{head, head, head}, d.calls)
}

func TestAwaitRetrySettledReturnsForMissingWorkflow(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	d := &scriptedDescriber{t: t}
	a := &activities.Activities{Workflows: d}
	env.RegisterActivityWithOptions(a.AwaitRetrySettled, activity.RegisterOptions{Name: contract.AwaitRetrySettledActivity})
	_, err := env.ExecuteActivity(contract.AwaitRetrySettledActivity, "projection-retry:p:f:never-started")
	require.NoError(t, err)
	require.Len(t, d.calls, 1)
}

// A lane waits for its head once: later events carrying the same head run
// without another AwaitRetrySettled.
func TestLaneWaitsForItsHeadOnce(t *testing.T) {
	h, o := newLaneHarness(t, nil)
	head := contract.RetryWorkflowID("artist_followers", "production", "head")
	d := &scriptedDescriber{t: t, states: []contract.State{contract.StateRetrying, contract.StateDeadLettered}}
	a := &activities.Activities{Workflows: d}
	h.env.RegisterActivityWithOptions(a.AwaitRetrySettled, activity.RegisterOptions{Name: contract.AwaitRetrySettledActivity})
	waits := 0
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == contract.AwaitRetrySettledActivity {
			waits++
		}
	})
	h.env.RegisterDelayedCallback(func() {
		for _, id := range []string{"e2", "e3", "e4"} {
			in := laneEvent(id, false)
			in.WaitFor = head
			enqueue(h, in)
		}
	}, 0)
	h.env.ExecuteWorkflow(contract.LaneWorkflowName, laneInput())
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, []string{"e2", "e3", "e4"}, o.applied)
	require.Equal(t, 1, waits, "one wait for the head, not one per event")
}
