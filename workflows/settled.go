package workflows

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// AwaitRetrySettledActivity waits until a retry workflow has settled (see
// RetrySettled); a lane runs it before an event whose WaitFor is set.
const AwaitRetrySettledActivity = "AwaitRetrySettled"

// RetrySettled reports whether the retry workflow described by info no
// longer holds its key's later events back: it is closed, or open only to
// wait for a replay or discard decision (dead_lettered, as a lane's child
// that reports dead_lettered lets the lane move on). A nil info (no such
// workflow) is settled: there is nothing to wait for.
func RetrySettled(info *workflowpb.WorkflowExecutionInfo) bool {
	if info == nil || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true
	}
	p, ok := info.GetSearchAttributes().GetIndexedFields()[AttrRetryState.GetName()]
	if !ok {
		return false
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		return false
	}
	switch State(s) {
	case StateDeadLettered, StateDiscarded, StateSucceeded:
		return true
	}
	return false
}

// Describer describes workflow executions; a client.Client is one.
type Describer interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// RetryWorkflowSettled describes the latest run of workflowID and reports
// whether it has settled (RetrySettled); a workflow that does not exist has.
func RetryWorkflowSettled(ctx context.Context, d Describer, workflowID string) (bool, error) {
	resp, err := d.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return RetrySettled(resp.GetWorkflowExecutionInfo()), nil
}

// awaitSettled runs AwaitRetrySettledActivity for workflowID. The activity
// polls and heartbeats; a worker that dies mid-wait is noticed by the
// heartbeat timeout and the wait resumes on another.
func awaitSettled(ctx workflow.Context, workflowID string) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: awaitSettledStartToClose,
		HeartbeatTimeout:    awaitSettledHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
	return workflow.ExecuteActivity(actx, AwaitRetrySettledActivity, workflowID).Get(ctx, nil)
}

const (
	// A retry schedule may be long (hours of backoff); an attempt that ends
	// here starts again, so this only bounds one activity attempt.
	awaitSettledStartToClose = time.Hour
	awaitSettledHeartbeat    = 30 * time.Second
)
