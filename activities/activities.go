package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
)

// Applier applies one event to one projection with the dedupe ledger;
// *projection.Engine is the production implementation.
type Applier interface {
	Apply(ctx context.Context, projectionName string, ev event.Envelope) (projection.Result, error)
}

// DeadLetterPublisher writes a DLQ record durably; *dlq.Publisher is the
// production implementation.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error)
}

// Activities holds what the activities share. Register it with the worker.
type Activities struct {
	// Applier applies projections. Required.
	Applier Applier
	// Publisher writes dead letters. Required.
	Publisher DeadLetterPublisher
	// Logger receives projection_retry, projection_dead_lettered and
	// projection_replayed lines. Optional, defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts retries, dead letters (as decided and as published)
	// and replays. Optional.
	Metrics *Metrics
	// Workflows describes the retry workflows lanes wait for. Optional,
	// defaults to the worker's client.
	Workflows contract.Describer
}

func (a *Activities) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// ApplyProjection makes one attempt at applying the event. It records every
// attempt so far, this one included, as heartbeat details when it starts and
// again when it fails; the next attempt reads them back. On failure it returns
// them all as the error's details, so the workflow (and the UI) sees each
// attempt's time and error, not only the last; an attempt that times out
// returns nothing, and its timeout carries the details instead.
func (a *Activities) ApplyProjection(ctx context.Context, in workflows.ApplyInput) (workflows.ApplyOutput, error) {
	info := activity.GetInfo(ctx)
	number := in.FirstAttempt + int(info.Attempt) - 1
	started := info.StartedTime
	if started.IsZero() {
		started = time.Now()
	}
	var earlier []contract.Attempt
	if activity.HasHeartbeatDetails(ctx) {
		// A decode failure only loses history of earlier attempts, never the event.
		_ = activity.GetHeartbeatDetails(ctx, &earlier)
	}
	// An earlier attempt still marked as started never reported: it timed out.
	earlier = workflows.SettleUnreported(earlier)
	// Record this attempt before it runs: if it overruns its timeout, the
	// timeout carries these details, and the workflow and the next attempt
	// still see it with its number and start time.
	activity.RecordHeartbeat(ctx, append(slices.Clip(earlier), contract.Attempt{Number: number, Run: in.Run, StartedAt: started}))

	var res projection.Result
	err := in.Event.Validate()
	if err == nil && in.Run > 0 && !in.Force {
		err = a.refuseOvertaken(ctx, in, number)
	}
	if err == nil {
		res, err = a.Applier.Apply(ctx, in.Projection, in.Event)
		if err == nil && res.Err != nil {
			err = res.Err
		}
	}
	if err == nil {
		if in.Run > 0 {
			a.logLine(ctx, "projection_replayed", in, number, slog.Int("replayCount", in.Run), slog.Int("irVersion", res.IRVersion))
			a.Metrics.replayed(in.Projection)
		}
		return workflows.ApplyOutput{
			IRVersion: res.IRVersion,
			Duplicate: res.Status == projection.StatusDuplicate,
			Attempts:  earlier,
			Attempt:   number,
			StartedAt: started,
		}, nil
	}

	kind := classify(err)
	attempts := append(earlier, contract.Attempt{
		Number: number, Run: in.Run, StartedAt: started,
		ErrorKind: string(kind), Error: err.Error(), IRVersion: res.IRVersion,
	})
	nonRetryable := kind == contract.KindInvalidEvent
	if delay, ok := nextDelay(in, number); ok && !nonRetryable {
		a.logLine(ctx, "projection_retry", in, number, slog.String("error", err.Error()), slog.String("nextRetryIn", delay.String()))
		a.Metrics.retried(in.Projection, string(kind))
	} else {
		a.logLine(ctx, "projection_dead_lettered", in, number, slog.String("error", err.Error()), slog.String("errorKind", string(kind)))
		a.Metrics.deadLettered(in.Projection, string(kind))
	}
	activity.RecordHeartbeat(ctx, attempts)
	if nonRetryable {
		return workflows.ApplyOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), string(kind), err, attempts)
	}
	return workflows.ApplyOutput{}, temporal.NewApplicationErrorWithCause(err.Error(), string(kind), err, attempts)
}

func nextDelay(in workflows.ApplyInput, number int) (time.Duration, bool) {
	if number < 1 || number >= in.MaxAttempts || number > len(in.Delays) {
		return 0, false
	}
	return in.Delays[number-1], true
}

func classify(err error) contract.ErrorKind {
	if event.IsInvalid(err) {
		return contract.KindInvalidEvent
	}
	var ae *projection.ApplyError
	if errors.As(err, &ae) {
		return ae.Kind
	}
	return projection.Classify(err)
}

// logLine writes one of the seed's structured lines; field names are the contract.
func (a *Activities) logLine(ctx context.Context, name string, in workflows.ApplyInput, attempt int, extra ...slog.Attr) {
	attrs := []slog.Attr{
		slog.String("event", name),
		slog.String("projectionName", in.Projection),
		slog.String("eventType", in.Event.EventType),
		slog.String("entityId", in.Event.EntityID),
		slog.String("forkId", in.Event.ForkID),
		slog.String("eventId", in.Event.EventID),
		slog.Int("retryAttempt", attempt),
	}
	level := slog.LevelWarn
	if name == "projection_dead_lettered" {
		level = slog.LevelError
	} else if name == "projection_replayed" {
		level = slog.LevelInfo
	}
	a.logger().LogAttrs(ctx, level, name, append(attrs, extra...)...)
}

// PublishDeadLetter writes the DLQ record of CONTRACT §7 and returns where it
// landed. Its retry policy never gives up, so a failure here is retried until
// the topic accepts the record.
func (a *Activities) PublishDeadLetter(ctx context.Context, in contract.DeadLetterInput) (contract.DLQCoordinates, error) {
	info := activity.GetInfo(ctx)
	rec := dlq.RunRecord(in, time.Now())
	rec.Workflow = &dlq.WorkflowRef{
		Namespace: info.Namespace,
		ID:        info.WorkflowExecution.ID,
		RunID:     info.WorkflowExecution.RunID,
	}
	key := in.Key
	if len(key) == 0 {
		key = []byte(in.Event.EntityID)
	}
	at, err := a.Publisher.Publish(ctx, key, rec)
	if err != nil {
		a.logger().LogAttrs(ctx, slog.LevelWarn, "dead letter publish failed; will retry",
			slog.String("projectionName", in.Projection), slog.String("eventId", in.Event.EventID), slog.Any("err", err))
		return at, err
	}
	a.Metrics.publishedDeadLetter(in.Projection, rec.ErrorKind)
	return at, nil
}

// overtakeChecker finds a later event of the entity that the projection
// applied already; *projection.Engine is one.
type overtakeChecker interface {
	LaterApplied(ctx context.Context, projection string, ev event.Envelope) (*projection.Later, error)
}

// refuseOvertaken refuses a replay of an event whose entity has since
// applied a later one (CAUSET_DLQ_HOLD_ENTITY off lets it move on): applying
// it now would take the read model back. The refusal is an invalid event,
// so the run is dead-lettered again with the reason; a replay with
// "force": true applies it anyway.
func (a *Activities) refuseOvertaken(ctx context.Context, in workflows.ApplyInput, number int) error {
	c, ok := a.Applier.(overtakeChecker)
	if !ok {
		return nil
	}
	later, err := c.LaterApplied(ctx, in.Projection, in.Event)
	if err != nil || later == nil {
		return err
	}
	a.logLine(ctx, "projection_replay_refused", in, number, slog.Int64("sequence", in.Event.Sequence),
		slog.String("laterEventId", later.EventID), slog.Int64("laterSequence", later.Sequence))
	return &event.InvalidError{Reason: fmt.Sprintf(
		"replay refused: %s already applied a later event of entity %s (sequence %d, eventId %s) than this one (sequence %d); "+
			"replay with {\"force\":true} to apply it anyway, or discard it",
		in.Projection, in.Event.EntityID, later.Sequence, later.EventID, in.Event.Sequence)}
}
