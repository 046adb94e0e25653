package activities

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"

	"github.com/causet/projection-retry/workflows"
)

// WorkflowDescriber describes workflow executions; a client.Client is one.
type WorkflowDescriber interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// settlePollInterval is how often AwaitRetrySettled looks: the longest a
// lane waits after the earlier event of its key has settled.
const settlePollInterval = 500 * time.Millisecond

// AwaitRetrySettled returns once the retry workflow workflowID has settled
// (workflows.RetrySettled) or does not exist, heartbeating while it waits.
// It describes the workflow with Activities.Workflows, else the worker's
// client.
func (a *Activities) AwaitRetrySettled(ctx context.Context, workflowID string) error {
	var d WorkflowDescriber = a.Workflows
	if d == nil {
		d = activity.GetClient(ctx)
	}
	t := time.NewTicker(settlePollInterval)
	defer t.Stop()
	for {
		resp, err := d.DescribeWorkflowExecution(ctx, workflowID, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.logger().LogAttrs(ctx, slog.LevelDebug, "cannot describe the retry workflow a lane waits for; polling on",
				slog.String("workflowId", workflowID), slog.Any("err", err))
		case workflows.RetrySettled(resp.GetWorkflowExecutionInfo()):
			return nil
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
