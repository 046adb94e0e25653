package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
)

// The hand-off: how an event reaches Temporal (its retry workflow started
// until durable, within the MaxInflight bound) or, when it never can, the
// DLQ; and the contract's log line for each.

// WorkflowStarter starts workflows; client.Client satisfies it. Tests wrap
// it to simulate a Temporal outage.
type WorkflowStarter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// StartOptions are the start options of the retry workflow for in: the
// contract's idempotent ID (a second start finds the running or closed run
// instead of creating one) and its search attributes in state retrying.
func StartOptions(taskQueue string, in contract.RetryInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       in.WorkflowID(),
		TaskQueue:                taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    in.SearchAttributes(),
		StaticSummary:            in.Summary(),
		StaticDetails:            in.Details(),
	}
}

// startRetryWorkflow starts (or finds) the retry workflow of in. A closed
// run with the same ID (WorkflowExecutionAlreadyStarted under
// REJECT_DUPLICATE) counts as handed off: the event already had its run.
func startRetryWorkflow(ctx context.Context, s WorkflowStarter, taskQueue string, in contract.RetryInput) error {
	_, err := s.ExecuteWorkflow(ctx, StartOptions(taskQueue, in), contract.RetryWorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return nil
	}
	return err
}

// handoffs is a partition's way to Temporal and to the DLQ: its hand-offs
// run in the partition's wait group, within the bridge's MaxInflight slots.
type handoffs struct {
	*waits
	log    *slog.Logger
	wg     *sync.WaitGroup
	sem    chan struct{}
	dlq    *dlq.Publisher
	tracer *recordTracer
}

// handOff starts the retry workflow of in without blocking the partition on
// Temporal: it waits only for a slot of MaxInflight, then the start runs in
// its own goroutine and is retried with capped backoff until it returns
// (Temporal unavailable: the segment stays pending, so offsets stop at it).
// It returns false when the partition was stopped while waiting for a slot.
func (h *handoffs) handOff(seg *segment, rec *kgo.Record, in contract.RetryInput) bool {
	return h.handOffThen(seg, rec, in, nil)
}

// handOffThen is handOff that runs after (when not nil) with how the
// hand-off ended (started, or dead-lettered), before the segment counts the
// event done.
func (h *handoffs) handOffThen(seg *segment, rec *kgo.Record, in contract.RetryInput, after func(handoffEnd)) bool {
	if !h.acquireSlot() {
		return false
	}
	seg.pending.Add(1)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer h.releaseSlot()
		log := h.eventLog(rec, in)
		outage, end := h.startUntilDurable(log, rec, in)
		switch end {
		case handoffStopped:
			return // not handed off, not committed
		case handoffStarted:
			h.m.handedOff.WithLabelValues(string(in.Mode)).Inc()
			logHandOff(log, in, outage)
		}
		if after != nil {
			after(end)
		}
		seg.pending.Add(-1)
	}()
	return true
}

// acquireSlot waits for one of the bridge's MaxInflight slots; false when
// the partition stopped first.
// Waiting for a slot is a known wait (the hand-offs holding them wait on
// Temporal with backoff), beaten every second, not a stall.
func (h *handoffs) acquireSlot() bool {
	for {
		select {
		case h.sem <- struct{}{}:
			h.m.inflight.Inc()
			return true
		case <-h.ctx.Done():
			return false
		case <-time.After(time.Second):
			h.beat()
		}
	}
}

func (h *handoffs) releaseSlot() {
	<-h.sem
	h.m.inflight.Dec()
}

// recordLog is the partition's log with rec's offset.
func (h *handoffs) recordLog(rec *kgo.Record) *slog.Logger {
	return h.log.With("offset", rec.Offset)
}

// eventLog is recordLog with the fields of in's event.
func (h *handoffs) eventLog(rec *kgo.Record, in contract.RetryInput) *slog.Logger {
	return h.recordLog(rec).With("projectionName", in.Projection, "eventType", in.Event.EventType,
		"entityId", in.Event.EntityID, "forkId", in.Event.ForkID, "eventId", in.Event.EventID)
}

// parkedLog is the log of a parked event, which has no record of its own.
func (h *handoffs) parkedLog(in contract.RetryInput) *slog.Logger {
	return h.log.With("projectionName", in.Projection, "eventType", in.Event.EventType, "entityId", in.Event.EntityID,
		"forkId", in.Event.ForkID, "eventId", in.Event.EventID, "offset", in.Source.Offset)
}

// startUntilDurable starts in's retry workflow, retrying with capped
// backoff while Temporal is unavailable (offsets stop at the event
// meanwhile). An event whose workflow Temporal refuses is dead-lettered
// here instead. It returns when an outage began (zero if there was none)
// and how the hand-off ended. The start continues rec's trace (tracing.go).
func (h *handoffs) startUntilDurable(log *slog.Logger, rec *kgo.Record, in contract.RetryInput) (time.Time, handoffEnd) {
	span := startHandoffSpan(rec, in, h.tracer.provider())
	outage, end := h.untilStarted(log, in, func(ctx context.Context) error {
		return startRetryWorkflow(withSpan(ctx, span), h.opts.Starter, h.opts.TaskQueue, in)
	})
	endHandoffSpan(span, end)
	return outage, end
}

// untilStarted runs start until it succeeds, classifying each failure once:
// throttling or a Temporal that does not answer its probe is an outage
// (wait, retry the same start); a refusal of the event's workflow itself
// (invalid argument: an ID, search attribute or input Temporal cannot store)
// or failures while Temporal answers, maxHealthyStartFailures times, make
// the event invalid: it is dead-lettered at once.
func (h *handoffs) untilStarted(log *slog.Logger, in contract.RetryInput, start func(ctx context.Context) error) (time.Time, handoffEnd) {
	r := h.retrier(log, h.temporal())
	for {
		ctx, cancel := context.WithTimeout(h.ctx, h.opts.StartTimeout)
		err := start(ctx)
		cancel()
		if err == nil {
			return r.outage, handoffStarted
		}
		if h.ctx.Err() != nil {
			return r.outage, handoffStopped
		}
		if r.refuses("cannot start retry workflow: offsets stop here, retrying with backoff", err) {
			if !h.deadLetterRefused(log, in, err) {
				return r.outage, handoffStopped
			}
			return r.outage, handoffDeadLettered
		}
		h.m.handoffRetry.Inc()
		if !r.wait() {
			return r.outage, handoffStopped
		}
	}
}

// handoffEnd is how handing an event to Temporal ended.
type handoffEnd int

const (
	handoffStarted      handoffEnd = iota // its workflow is durable
	handoffDeadLettered                   // Temporal refused it: dead-lettered as invalid_event
	handoffStopped                        // the partition stopped first: not committed
)

// deadLetterRefused writes an event whose retry workflow Temporal refused
// to the DLQ as invalid_event, keeping its failed attempt 1 if it had one.
func (h *handoffs) deadLetterRefused(log *slog.Logger, in contract.RetryInput, cause error) bool {
	now := time.Now().UTC()
	var attempts []contract.Attempt
	if in.FirstAttempt != nil {
		attempts = append(attempts, *in.FirstAttempt)
	}
	attempts = append(attempts, contract.Attempt{Number: len(attempts) + 1, StartedAt: now,
		ErrorKind: string(contract.KindInvalidEvent), Error: "temporal refused the retry workflow: " + cause.Error()})
	dl := contract.DeadLetterInput{Event: in.Event, Key: in.Key, Projection: in.Projection, Attempts: attempts, Source: in.Source}
	if in.FirstAttempt != nil {
		dl.IRVersion = in.FirstAttempt.IRVersion
	}
	return h.publishDeadLetter(log, "refused event", in.Key, dlq.RunRecord(dl, now))
}

// logHandOff writes, for a failed inline attempt 1, the contract's
// projection_retry line (or projection_dead_lettered when the schedule has
// a single attempt), once the retry workflow that owns the rest is durable.
func logHandOff(log *slog.Logger, in contract.RetryInput, outage time.Time) {
	attrs := []any{"workflowId", in.WorkflowID()}
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

func sourceOf(rec *kgo.Record) contract.Source {
	return contract.Source{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp}
}

// deadLetterPoison writes a record that is not a valid envelope to the DLQ
// (raw bytes kept, errorKind invalid_event) before its offset can be
// committed. False when stopped first.
func (h *handoffs) deadLetterPoison(rec *kgo.Record, cause error) bool {
	return h.publishDeadLetter(h.recordLog(rec), "poison record", rec.Key, dlq.PoisonRecord(rec.Value, cause, sourceOf(rec), time.Now()))
}

// publishDeadLetters writes rs to the DLQ in one produce, trying again
// with capped backoff the ones Kafka refused, so a hold of thousands of
// events is dead-lettered in a few produces rather than one round trip
// each. logs[i] is rs[i]'s logger. False when stopped first.
func (h *handoffs) publishDeadLetters(logs []*slog.Logger, what string, rs []dlq.Keyed) bool {
	left := make([]int, len(rs))
	for i := range left {
		left[i] = i
	}
	ok := h.until(h.log, "kafka", fmt.Sprintf("cannot dead-letter %d %ss", len(rs), what), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
		defer cancel()
		try := make([]dlq.Keyed, len(left))
		for j, i := range left {
			try[j] = rs[i]
		}
		at, errs := h.dlq.PublishAll(ctx, try)
		var failed []int
		var first error
		for j, i := range left {
			if errs[j] != nil {
				failed = append(failed, i)
				first = cmp.Or(first, errs[j])
				continue
			}
			h.deadLettered(logs[i], what, rs[i].Record, at[j])
		}
		left = failed
		if first != nil {
			return fmt.Errorf("%d of %d not written: %w", len(failed), len(try), first)
		}
		return nil
	})
	return ok
}

// publishDeadLetter writes r to the DLQ, retrying with capped backoff while
// Kafka refuses it. False when stopped first.
func (h *handoffs) publishDeadLetter(log *slog.Logger, what string, key []byte, r dlq.Record) bool {
	var at contract.DLQCoordinates
	ok := h.until(log, "kafka", "cannot dead-letter "+what, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
		defer cancel()
		var err error
		at, err = h.dlq.Publish(ctx, key, r)
		return err
	})
	if ok {
		h.deadLettered(log, what, r, at)
	}
	return ok
}

// deadLettered counts and logs a dead letter written at at.
func (h *handoffs) deadLettered(log *slog.Logger, what string, r dlq.Record, at contract.DLQCoordinates) {
	h.m.deadLettered.WithLabelValues(r.ProjectionName, r.ErrorKind).Inc()
	log.Warn(what+" dead-lettered", "event", "projection_dead_lettered", "errorKind", r.ErrorKind,
		"error", r.Error, "dlqTopic", at.Topic, "dlqPartition", at.Partition, "dlqOffset", at.Offset)
}
