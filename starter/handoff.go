package starter

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/workflows"
)

// WorkflowStarter starts workflows; client.Client satisfies it. Tests wrap
// it to simulate a Temporal outage.
type WorkflowStarter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// StartOptions are the start options of the retry workflow for in: the
// contract's idempotent ID (a second start finds the running or closed run
// instead of creating one) and the five search attributes in state retrying.
func StartOptions(taskQueue string, in workflows.RetryInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       workflows.RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID),
		TaskQueue:                taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.AttrProjection.ValueSet(in.Projection),
			workflows.AttrEventType.ValueSet(in.Event.EventType),
			workflows.AttrEntityID.ValueSet(in.Event.EntityID),
			workflows.AttrForkID.ValueSet(in.Event.ForkID),
			workflows.AttrRetryState.ValueSet(string(workflows.StateRetrying)),
		),
	}
}

// startRetryWorkflow starts (or finds) the retry workflow of in. A closed
// run with the same ID (WorkflowExecutionAlreadyStarted under
// REJECT_DUPLICATE) counts as handed off: the event already had its run.
func startRetryWorkflow(ctx context.Context, s WorkflowStarter, taskQueue string, in workflows.RetryInput) error {
	_, err := s.ExecuteWorkflow(ctx, StartOptions(taskQueue, in), workflows.RetryWorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return nil
	}
	return err
}

// backoff is a capped exponential backoff with jitter.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi} }

// next returns the next wait: min, doubling, capped at max, ±20% jitter.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	j := time.Duration(float64(b.cur) * (0.8 + 0.4*rand.Float64()))
	return j
}

// wait sleeps for the next backoff or until ctx is done.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
