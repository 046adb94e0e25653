package starter

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/dlq"
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

// handOff starts the retry workflow of in without blocking the partition on
// Temporal: it waits only for a slot of MaxInflight, then the start runs in
// its own goroutine and is retried with capped backoff until it returns
// (Temporal unavailable: the segment stays pending, so offsets stop at it).
// It returns false when the partition was stopped while waiting for a slot.
func (p *partition) handOff(seg *segment, rec *kgo.Record, in workflows.RetryInput) bool {
	b := p.b
	select {
	case b.sem <- struct{}{}:
	case <-p.ctx.Done():
		return false
	}
	seg.pending.Add(1)
	b.m.inflight.Inc()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			<-b.sem
			b.m.inflight.Dec()
		}()
		log := p.eventLog(rec, in)
		outage, end := p.startUntilDurable(log, in)
		switch end {
		case handoffStopped:
			return // not handed off, not committed
		case handoffStarted:
			b.m.handedOff.WithLabelValues(string(in.Mode)).Inc()
			logHandOff(log, in, outage)
		}
		seg.pending.Add(-1)
	}()
	return true
}

func (p *partition) eventLog(rec *kgo.Record, in workflows.RetryInput) *slog.Logger {
	return p.recordLog(rec).With("projectionName", in.Projection, "eventType", in.Event.EventType,
		"entityId", in.Event.EntityID, "forkId", in.Event.ForkID, "eventId", in.Event.EventID)
}

// startUntilDurable starts in's retry workflow, retrying with capped
// backoff while Temporal is unavailable (offsets stop at the event
// meanwhile). An event whose workflow Temporal refuses (classifyStart) is
// dead-lettered here instead. It returns when an outage began (zero if there
// was none) and how the hand-off ended.
func (p *partition) startUntilDurable(log *slog.Logger, in workflows.RetryInput) (time.Time, handoffEnd) {
	b := p.b
	return p.untilStarted(log, in, func(ctx context.Context) error {
		return startRetryWorkflow(ctx, b.opts.Starter, b.opts.TaskQueue, in)
	})
}

// untilStarted runs start until it succeeds, classifying each failure once:
// throttling or a Temporal that does not answer its probe is an outage
// (wait, retry the same start); a refusal of the event's workflow itself
// (invalid argument: an ID, search attribute or input Temporal cannot store)
// or failures while Temporal answers, maxHealthyStartFailures times, make
// the event invalid: it is dead-lettered at once.
func (p *partition) untilStarted(log *slog.Logger, in workflows.RetryInput, start func(ctx context.Context) error) (time.Time, handoffEnd) {
	b := p.b
	bo := newBackoff(b.opts.MinBackoff, b.opts.MaxBackoff)
	var outage time.Time
	healthy := 0
	for {
		ctx, cancel := context.WithTimeout(p.ctx, b.opts.StartTimeout)
		err := start(ctx)
		cancel()
		if err == nil {
			return outage, handoffStarted
		}
		if p.ctx.Err() != nil {
			return outage, handoffStopped
		}
		refused := isRefusal(err)
		if !refused && !isThrottled(err) && p.answers(b.opts.TemporalProbe) {
			healthy++
			refused = healthy >= maxHealthyStartFailures
		}
		if refused {
			if !p.deadLetterRefused(log, in, err) {
				return outage, handoffStopped
			}
			return outage, handoffDeadLettered
		}
		b.m.handoffRetry.Inc()
		if outage.IsZero() {
			outage = time.Now()
			b.m.outages.WithLabelValues("temporal").Inc()
			log.Warn("cannot start retry workflow: offsets stop here, retrying with backoff",
				"event", "bridge_outage", "dependency", "temporal", "error", err.Error())
		} else {
			log.Debug("still cannot start retry workflow", "dependency", "temporal", "error", err.Error())
		}
		if bo.wait(p.ctx) != nil {
			return outage, handoffStopped
		}
	}
}

// handoffEnd is how handing an event to Temporal ended.
type handoffEnd int

const (
	handoffStarted      handoffEnd = iota // its workflow is durable (or its lane took it)
	handoffDeadLettered                   // Temporal refused it: dead-lettered as invalid_event
	handoffStopped                        // the partition stopped first: not committed
)

// maxHealthyStartFailures bounds the failed starts of one event while
// Temporal answers its probe: past it the event, not Temporal, is at fault.
const maxHealthyStartFailures = 5

// isRefusal reports a start Temporal refused because of the request itself:
// retrying the same request can never succeed.
func isRefusal(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia)
}

// isThrottled reports a start refused for capacity (rate limits): Temporal
// answers but is saturated, an outage of capacity.
func isThrottled(err error) bool {
	var re *serviceerror.ResourceExhausted
	return errors.As(err, &re)
}

// deadLetterRefused writes an event whose retry workflow Temporal refused
// to the DLQ as invalid_event, keeping its failed attempt 1 if it had one.
func (p *partition) deadLetterRefused(log *slog.Logger, in workflows.RetryInput, cause error) bool {
	now := time.Now().UTC()
	msg := "temporal refused the retry workflow: " + cause.Error()
	var attempts []workflows.Attempt
	if in.FirstAttempt != nil {
		attempts = append(attempts, *in.FirstAttempt)
	}
	attempts = append(attempts, workflows.Attempt{Number: len(attempts) + 1, StartedAt: now, ErrorKind: errorKindInvalid, Error: msg})
	r := activities.BuildRecord(workflows.DeadLetterInput{
		Event: in.Event, Key: in.Key, Projection: in.Projection, Attempts: attempts, Source: in.Source,
	}, now)
	if in.FirstAttempt != nil {
		r.IRVersion = in.FirstAttempt.IRVersion
	}
	return p.publishDeadLetter(log, "refused event", in.Key, r)
}

// logHandOff writes, for a failed inline attempt 1, the contract's
// projection_retry line (or projection_dead_lettered when the schedule has
// a single attempt), once the retry workflow that owns the rest is durable.
func logHandOff(log *slog.Logger, in workflows.RetryInput, outage time.Time) {
	attrs := []any{"workflowId", workflows.RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)}
	if !outage.IsZero() {
		attrs = append(attrs, "delayedBy", time.Since(outage).Round(time.Millisecond).String())
	}
	if in.FirstAttempt == nil {
		log.Debug("handed to Temporal", append(attrs, "event", "projection_handoff")...)
		return
	}
	attrs = append(attrs, "retryAttempt", 1, "error", in.FirstAttempt.Error, "errorKind", in.FirstAttempt.ErrorKind)
	if next, ok := in.Retry.Plan(in.Mode).NextDelay(1); ok {
		log.Warn("projection_retry", append(attrs, "event", "projection_retry", "nextRetryIn", next.String())...)
		return
	}
	log.Error("projection_dead_lettered", append(attrs, "event", "projection_dead_lettered")...)
}

func sourceOf(rec *kgo.Record) workflows.Source {
	return workflows.Source{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
}

// errorKindInvalid is the error kind of an event that can never succeed.
const errorKindInvalid = "invalid_event"

// deadLetterPoison writes a record that is not a valid envelope to the DLQ
// (raw bytes kept, errorKind invalid_event) before its offset can be
// committed. False when stopped first.
func (p *partition) deadLetterPoison(rec *kgo.Record, cause error) bool {
	now := time.Now().UTC()
	r := dlq.Record{
		RawValue:       rec.Value,
		ErrorKind:      errorKindInvalid,
		Error:          cause.Error(),
		RetryCount:     0,
		Attempts:       []workflows.Attempt{{Number: 1, StartedAt: now, ErrorKind: errorKindInvalid, Error: cause.Error()}},
		FirstFailedAt:  now,
		DeadLetteredAt: now,
		Source:         sourceOf(rec),
	}
	return p.publishDeadLetter(p.recordLog(rec), "poison record", rec.Key, r)
}

// publishDeadLetter writes r to the DLQ, retrying with capped backoff while
// Kafka refuses it. False when stopped first.
func (p *partition) publishDeadLetter(log *slog.Logger, what string, key []byte, r dlq.Record) bool {
	b := p.b
	bo := newBackoff(b.opts.MinBackoff, b.opts.MaxBackoff)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, b.opts.StartTimeout)
		at, err := b.dlq.Publish(ctx, key, r)
		cancel()
		if err == nil {
			b.m.deadLettered.Inc()
			log.Warn(what+" dead-lettered", "event", "projection_dead_lettered", "errorKind", r.ErrorKind,
				"error", r.Error, "dlqTopic", at.Topic, "dlqPartition", at.Partition, "dlqOffset", at.Offset)
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		log.Warn("cannot dead-letter "+what+", retrying with backoff", "dependency", "kafka", "error", err.Error())
		if bo.wait(p.ctx) != nil {
			return false
		}
	}
}
