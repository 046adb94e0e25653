package activities

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/causet/projection-retry/contract"
)

// settlePollInterval is how often AwaitRetrySettled looks at first; the
// interval doubles up to maxSettlePollInterval, so many long waits cost the
// server a trickle of describes. It bounds how long a lane waits after the
// earlier event of its key has settled.
const (
	settlePollInterval    = 500 * time.Millisecond
	maxSettlePollInterval = 10 * time.Second
)

// AwaitRetrySettled returns once the retry workflow workflowID has settled
// (contract.Settled) or does not exist, heartbeating while it waits.
// It describes the workflow with Activities.Workflows, else the worker's
// client.
func (a *Activities) AwaitRetrySettled(ctx context.Context, workflowID string) error {
	return a.awaitRetry(ctx, workflowID, contract.RetrySettled)
}

// AwaitRetryFinal returns once the retry workflow workflowID is final
// (contract.Final: an open dead letter is not) or does not exist.
func (a *Activities) AwaitRetryFinal(ctx context.Context, workflowID string) error {
	return a.awaitRetry(ctx, workflowID, contract.RetryFinal)
}

func (a *Activities) awaitRetry(ctx context.Context, workflowID string, done func(context.Context, contract.Describer, string) (bool, error)) error {
	var d contract.Describer = a.Workflows
	if d == nil {
		d = activity.GetClient(ctx)
	}
	// Heartbeats go every settlePollInterval whatever the describe interval,
	// so a wait survives a heartbeat timeout shorter than that interval.
	t := time.NewTicker(settlePollInterval)
	defer t.Stop()
	every := settlePollInterval
	next := time.Now()
	for {
		if !time.Now().Before(next) {
			settled, err := done(ctx, d, workflowID)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				a.logger().LogAttrs(ctx, slog.LevelDebug, "cannot describe the retry workflow a lane waits for; polling on",
					slog.String("workflowId", workflowID), slog.Any("err", err))
			case settled:
				return nil
			}
			next = time.Now().Add(every)
			every = min(2*every, maxSettlePollInterval)
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
