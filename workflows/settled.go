package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
)

// awaitSettled runs AwaitRetrySettledActivity for workflowID. The activity
// polls and heartbeats; a worker that dies mid-wait is noticed by the
// heartbeat timeout and the wait resumes on another.
func awaitSettled(ctx workflow.Context, workflowID string) error {
	return awaitRetry(ctx, contract.AwaitRetrySettledActivity, workflowID)
}

// awaitFinal is awaitSettled until the workflow is final (contract.Final):
// an open dead letter holds its entity (CAUSET_DLQ_HOLD_ENTITY).
func awaitFinal(ctx workflow.Context, workflowID string) error {
	return awaitRetry(ctx, contract.AwaitRetryFinalActivity, workflowID)
}

func awaitRetry(ctx workflow.Context, activity, workflowID string) error {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: awaitSettledStartToClose,
		HeartbeatTimeout:    awaitSettledHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	}
	if workflow.GetVersion(ctx, waitQueueChange, workflow.DefaultVersion, 1) == 1 {
		opts.TaskQueue = contract.WaitTaskQueue(workflow.GetInfo(ctx).TaskQueueName)
	}
	actx := workflow.WithActivityOptions(ctx, opts)
	return workflow.ExecuteActivity(actx, activity, workflowID).Get(ctx, nil)
}

// waitQueueChange moves the waits to their own task queue
// (contract.WaitTaskQueue); lanes that waited on the main queue replay so.
const waitQueueChange = "wait-queue"

const (
	// A retry schedule may be long (hours of backoff); an attempt that ends
	// here starts again, so this only bounds one activity attempt.
	awaitSettledStartToClose = time.Hour
	awaitSettledHeartbeat    = 30 * time.Second
)
