package contract

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// Settled reports whether the retry workflow described by info no longer
// holds its key's later events back: it is closed, or open only to wait for
// a replay or discard decision (dead_lettered). A nil info (no such
// workflow) is settled: there is nothing to wait for.
func Settled(info *workflowpb.WorkflowExecutionInfo) bool {
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

// RetrySettled describes the latest run of workflowID and reports whether it
// has settled (Settled); a workflow that does not exist has.
func RetrySettled(ctx context.Context, d Describer, workflowID string) (bool, error) {
	return describedAs(ctx, d, workflowID, Settled)
}

// describedAs describes the latest run of workflowID and judges it; a
// workflow that does not exist is judged done.
func describedAs(ctx context.Context, d Describer, workflowID string, judge func(*workflowpb.WorkflowExecutionInfo) bool) (bool, error) {
	resp, err := d.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return judge(resp.GetWorkflowExecutionInfo()), nil
}

// Final reports whether a retry workflow has reached a state that lets its
// entity's later events go when dead letters hold their entity
// (CAUSET_DLQ_HOLD_ENTITY): succeeded, discarded or closed. Unlike Settled,
// an open dead letter is not final: it may still be replayed.
func Final(info *workflowpb.WorkflowExecutionInfo) bool {
	if info == nil || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true
	}
	return Settled(info) && retryState(info) != StateDeadLettered
}

func retryState(info *workflowpb.WorkflowExecutionInfo) State {
	p, ok := info.GetSearchAttributes().GetIndexedFields()[AttrRetryState.GetName()]
	if !ok {
		return ""
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		return ""
	}
	return State(s)
}

// RetryFinal is RetrySettled with Final.
func RetryFinal(ctx context.Context, d Describer, workflowID string) (bool, error) {
	return describedAs(ctx, d, workflowID, Final)
}
