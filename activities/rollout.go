package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/rollout"
)

// Rollouts implements the rollout workflow's activities on a
// rollout.Runner.
type Rollouts struct {
	Runner *rollout.Runner
}

// CheckCandidate checks the rollout's candidate against the events failing
// now and records them as its affected events, a page at a time. A
// candidate that does not validate fails it for good
// (contract.InvalidCandidateType). It heartbeats every checkBeat with its
// progress, so that a worker lost in a long check is noticed within the
// heartbeat timeout and the next try goes on after the pages recorded.
func (a *Rollouts) CheckCandidate(ctx context.Context, rolloutID string, in contract.RolloutInput) (contract.CheckCandidateResult, error) {
	var from *rollout.CheckProgress
	if activity.HasHeartbeatDetails(ctx) {
		var p rollout.CheckProgress
		if activity.GetHeartbeatDetails(ctx, &p) == nil {
			from = &p
		}
	}
	var mu sync.Mutex
	last := from
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(checkBeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				if last != nil {
					activity.RecordHeartbeat(ctx, *last)
				} else {
					activity.RecordHeartbeat(ctx)
				}
				mu.Unlock()
			}
		}
	}()
	out, err := a.Runner.Check(ctx, rolloutID, in, from, func(p rollout.CheckProgress) {
		mu.Lock()
		defer mu.Unlock()
		last = &p
		activity.RecordHeartbeat(ctx, p)
	})
	return out, invalidCandidate(err)
}

// checkBeat is how often a running check heartbeats.
const checkBeat = 5 * time.Second

// DeployCandidate deploys the candidate unless it is deployed already.
func (a *Rollouts) DeployCandidate(ctx context.Context, in contract.RolloutInput) (contract.DeployCandidateResult, error) {
	out, err := a.Runner.Deploy(ctx, in)
	return out, invalidCandidate(err)
}

// ReplayFailing replays the next batch of the rollout's dead letters,
// heartbeating after each: a try after a lost worker goes on after the
// last replay the previous one reported.
func (a *Rollouts) ReplayFailing(ctx context.Context, in contract.ReplayFailingInput) (contract.ReplayFailingResult, error) {
	var done *contract.ReplayFailingResult
	if activity.HasHeartbeatDetails(ctx) {
		var d contract.ReplayFailingResult
		if activity.GetHeartbeatDetails(ctx, &d) == nil {
			done = &d
		}
	}
	return a.Runner.ReplayBatch(ctx, in, done, func(r contract.ReplayFailingResult) { activity.RecordHeartbeat(ctx, r) })
}

// CountSettled counts the rollout's events applied, failing again and
// pending.
func (a *Rollouts) CountSettled(ctx context.Context, in contract.CountSettledInput) (contract.SettledCount, error) {
	return a.Runner.CountSettled(ctx, in)
}

func invalidCandidate(err error) error {
	var ve *projection.ValidationError
	if errors.As(err, &ve) {
		return temporal.NewNonRetryableApplicationError(err.Error(), contract.InvalidCandidateType, err)
	}
	return err
}
