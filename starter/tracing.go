package starter

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/tracing"
)

// Tracing. With tracing hooks on the Kafka client (kotel, see
// internal/tracing) each fetched record's Context holds its receive span,
// a child of the producer's trace; without them Context is nil and every
// span here is a no-op, so the bridge needs no tracing option of its own:
// the spans are made by the provider that traced the record.
//
// A batch's apply is one span, linked to its records' spans (it serves many
// traces). A failed event's hand-off is a span in its record's trace; the
// workflow start runs in it, so with the Temporal tracing interceptor the
// workflow and its activities continue the trace. A parked event keeps its
// record's trace context, and the start of its retry workflow after a
// release continues that trace.

const tracerName = "github.com/causet/projection-retry/starter"

// recordSpan is the span kotel put in rec's Context; nil without tracing.
func recordSpan(rec *kgo.Record) trace.Span {
	if rec == nil || rec.Context == nil {
		return nil
	}
	s := trace.SpanFromContext(rec.Context)
	if !s.SpanContext().IsValid() {
		return nil
	}
	return s
}

// recordTracer is what a partition knows of tracing: the topic-partition
// its spans name, and the provider that traced its records.
type recordTracer struct {
	topic string
	id    int32
	tp    atomic.Value // trace.TracerProvider, once a traced record was seen
}

// startBatchSpan starts the span of applying one batch of items (last is
// its last record): a new root, linked to each record's span.
func (t *recordTracer) startBatchSpan(items []item, last *kgo.Record) trace.Span {
	if len(items) == 0 {
		return noop.Span{}
	}
	s := recordSpan(items[0].rec)
	if s == nil {
		return noop.Span{}
	}
	links := make([]trace.Link, 0, len(items))
	for _, it := range items {
		if rs := recordSpan(it.rec); rs != nil {
			links = append(links, trace.Link{SpanContext: rs.SpanContext()})
		}
	}
	_, span := s.TracerProvider().Tracer(tracerName).Start(context.Background(), "apply batch",
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.source.name", t.topic),
			attribute.Int("messaging.kafka.source.partition", int(t.id)),
			attribute.Int("messaging.batch.message_count", len(items)),
			attribute.Int64("causet.first_offset", items[0].rec.Offset),
			attribute.Int64("causet.last_offset", last.Offset),
		))
	return span
}

// startHandoffSpan starts the span of handing in's event (rec) to Temporal,
// a child of the record's span: "apply" — its failed attempt 1, when it had
// one, is recorded on it. A released event has no record: its span is a
// child of the trace context it was parked with, made with tp (the
// provider that traced the partition's records; nil: none).
func startHandoffSpan(rec *kgo.Record, in contract.RetryInput, tp trace.TracerProvider) trace.Span {
	parent := context.Context(nil)
	if s := recordSpan(rec); s != nil {
		parent, tp = rec.Context, s.TracerProvider()
	} else if rec == nil && len(in.TraceContext) > 0 && tp != nil {
		parent = tracing.Propagator().Extract(context.Background(), propagation.MapCarrier(in.TraceContext))
		if !trace.SpanContextFromContext(parent).IsValid() {
			parent = nil
		}
	}
	if parent == nil {
		return noop.Span{}
	}
	_, span := tp.Tracer(tracerName).Start(parent, "apply",
		trace.WithAttributes(
			attribute.String("causet.projection", in.Projection),
			attribute.String("causet.event_id", in.Event.EventID),
			attribute.String("causet.event_type", in.Event.EventType),
			attribute.String("causet.fork_id", in.Event.ForkID),
			attribute.String("causet.workflow_id", in.WorkflowID()),
			attribute.String("causet.mode", string(in.Mode)),
		))
	if a := in.FirstAttempt; a != nil {
		span.AddEvent("attempt failed", trace.WithAttributes(
			attribute.Int("causet.attempt", a.Number),
			attribute.String("causet.error_kind", a.ErrorKind),
			attribute.String("causet.error", a.Error),
		))
	}
	return span
}

// endHandoffSpan ends span with how the hand-off ended.
func endHandoffSpan(span trace.Span, end handoffEnd) {
	switch end {
	case handoffStarted:
		span.SetAttributes(attribute.String("causet.handoff", "started"))
	case handoffDeadLettered:
		span.SetAttributes(attribute.String("causet.handoff", "dead_lettered"))
		span.SetStatus(codes.Error, "temporal refused the event: dead-lettered as invalid_event")
	case handoffStopped:
		span.SetAttributes(attribute.String("causet.handoff", "stopped"))
	}
	span.End()
}

// traceContextOf is span's W3C trace context, for an event parked now and
// started later (contract.RetryInput.TraceContext); nil for a no-op span.
func traceContextOf(span trace.Span) map[string]string {
	if !span.SpanContext().IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	tracing.Propagator().Inject(trace.ContextWithSpan(context.Background(), span), carrier)
	return carrier
}

// withSpan is ctx carrying span, whose trace a workflow started with ctx
// continues; ctx itself when span is a no-op.
func withSpan(ctx context.Context, span trace.Span) context.Context {
	if !span.SpanContext().IsValid() {
		return ctx
	}
	return trace.ContextWithSpan(ctx, span)
}

// provider is the provider that traced the partition's records (nil until
// one was traced).
func (t *recordTracer) provider() trace.TracerProvider {
	tp, _ := t.tp.Load().(trace.TracerProvider)
	return tp
}

// noteTracer remembers the provider that traced rec, for the spans of
// events released later without a record.
func (t *recordTracer) note(rec *kgo.Record) {
	if t.tp.Load() != nil {
		return
	}
	if s := recordSpan(rec); s != nil {
		t.tp.Store(s.TracerProvider())
	}
}
