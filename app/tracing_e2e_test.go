package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/internal/tracing"
)

// spans indexes the spans a SpanRecorder saw start (ended or not: a
// dead-lettered run's RunWorkflow span stays open with the run).
type spans []sdktrace.ReadWriteSpan

func (ss spans) named(t *testing.T, name string) []sdktrace.ReadWriteSpan {
	t.Helper()
	var out []sdktrace.ReadWriteSpan
	for _, s := range ss {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	require.NotEmpty(t, out, "no span %q", name)
	return out
}

// one is the only span called name.
func (ss spans) one(t *testing.T, name string) sdktrace.ReadWriteSpan {
	t.Helper()
	got := ss.named(t, name)
	require.Len(t, got, 1, "spans %q", name)
	return got[0]
}

// childOf asserts that every span called name has parent as its parent,
// in parent's trace, and returns the first.
func (ss spans) childOf(t *testing.T, name string, parent trace.SpanContext) sdktrace.ReadWriteSpan {
	t.Helper()
	got := ss.named(t, name)
	for _, s := range got {
		require.Equal(t, parent.TraceID(), s.SpanContext().TraceID(), "%s is in the event's trace", name)
		require.Equal(t, parent.SpanID(), s.Parent().SpanID(), "%s's parent", name)
	}
	return got[0]
}

func headerMap(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

// TestTracingKafkaEventToDeadLetterAndReplay runs the real bridge and worker
// with tracing on an in-memory recorder: an event produced in a trace fails
// every attempt, and its dead letter, the spans of the bridge, the workflow,
// its activities and the DLQ produce, and the replay's signal are all in
// that one trace, each the child of the step before.
func TestTracingKafkaEventToDeadLetterAndReplay(t *testing.T) {
	// none: the failure's own retry workflow (handOff); entity: the key's
	// head (the lane router's start).
	for _, ordering := range []string{"none", "entity"} {
		t.Run(ordering, func(t *testing.T) { testTracingEventToDeadLetter(t, ordering) })
	}
}

// tracedStack is a bridge and a worker, as the commands assemble them, with
// tracing on an in-memory recorder.
type tracedStack struct {
	sr              *tracetest.SpanRecorder
	tp              *sdktrace.TracerProvider
	tr              *tracing.Tracing
	svc             *app.Service
	cfg             config.Config
	brokers         []string
	topic, dlqTopic string
	ctx             context.Context
}

func startTracedStack(t *testing.T, ordering string) *tracedStack {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp, nil)

	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	env, topic, dlqTopic := consumerEnv(t, brokers, map[string]string{
		"CAUSET_ORDERING":                    ordering,
		"PROJECTION_WORKER_MAX_RETRIES":      "2",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "1000",
	})
	cfg := load(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()), app.WithTemporalAddress(srv.HostPort), app.WithTracing(tr),
		withFollowers(testenv.FollowersNoFollowedAtDDL))
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	w, err := svc.NewWorker()
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	stopBridge, done := runBridge(t, ctx, svc)
	t.Cleanup(func() {
		stopBridge()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("bridge did not stop")
		}
	})
	return &tracedStack{sr: sr, tp: tp, tr: tr, svc: svc, cfg: cfg, brokers: brokers, topic: topic, dlqTopic: dlqTopic, ctx: ctx}
}

// produce sends an ARTIST_FOLLOWED of entity user-7 inside a new root span
// (the producer's trace), whose kotel publish span the record's traceparent
// carries, and returns the event ID and the root.
func (s *tracedStack) produce(t *testing.T, name string) (string, trace.Span) {
	t.Helper()
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.brokers...), kgo.DefaultProduceTopic(s.topic)}, s.tr.KafkaOpts("")...)...)
	require.NoError(t, err)
	defer prod.Close()
	pctx, root := s.tp.Tracer("test").Start(s.ctx, "produce "+name)
	// A unique event: workflow IDs are the namespace's, shared by the tests.
	eventID := testenv.Topic(t, name)
	ev := `{"eventId":"` + eventID + `","eventType":"ARTIST_FOLLOWED","entityId":"user-7","forkId":"production",` +
		`"occurredAt":"2026-01-02T03:04:05Z","payload":{"artistId":"artist-9"}}`
	require.NoError(t, prod.ProduceSync(pctx, &kgo.Record{Key: []byte("user-7"), Value: []byte(ev)}).FirstErr())
	root.End()
	return eventID, root
}

// deadLetters reads n records from the DLQ topic with a client without
// hooks: the headers as written.
func (s *tracedStack) deadLetters(t *testing.T, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(s.dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fctx, fcancel := context.WithTimeout(s.ctx, 5*time.Second)
		fs := cl.PollFetches(fctx)
		fcancel()
		require.NoError(t, s.ctx.Err(), "%d of %d dead letters on %s", len(out), n, s.dlqTopic)
		out = append(out, fs.Records()...)
	}
	return out
}

func testTracingEventToDeadLetter(t *testing.T, ordering string) {
	st := startTracedStack(t, ordering)
	ctx, sr, tr, svc, cfg, topic, dlqTopic := st.ctx, st.sr, st.tr, st.svc, st.cfg, st.topic, st.dlqTopic
	eventID, root := st.produce(t, "ev-traced")
	traceID := root.SpanContext().TraceID()

	dead := st.deadLetters(t, 1)[0]
	rec, err := dlq.Decode(dead.Value)
	require.NoError(t, err)
	env, err := rec.Envelope()
	require.NoError(t, err)
	require.Equal(t, eventID, env.EventID)
	require.Equal(t, 2, rec.RetryCount)
	h := headerMap(dead)
	require.Contains(t, h, "traceparent")
	dlqSpan := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h)))
	require.True(t, dlqSpan.IsValid(), "traceparent %q", h["traceparent"])
	require.Equal(t, traceID, dlqSpan.TraceID(), "the dead letter carries the event's trace")

	ss := spans(sr.Started())
	publish := ss.childOf(t, topic+" publish", root.SpanContext())
	receive := ss.childOf(t, topic+" receive", publish.SpanContext())
	apply := ss.one(t, "apply")
	require.Equal(t, receive.SpanContext().SpanID(), apply.Parent().SpanID(), "the bridge's apply continues the record's trace")
	require.Equal(t, traceID, apply.SpanContext().TraceID())
	start := ss.childOf(t, "StartWorkflow:"+contract.RetryWorkflowName, apply.SpanContext())
	run := ss.childOf(t, "RunWorkflow:"+contract.RetryWorkflowName, start.SpanContext())
	startApply := ss.childOf(t, "StartActivity:"+contract.ApplyProjectionActivity, run.SpanContext())
	ss.childOf(t, "RunActivity:"+contract.ApplyProjectionActivity, startApply.SpanContext())
	startDLQ := ss.childOf(t, "StartActivity:"+contract.PublishDeadLetterActivity, run.SpanContext())
	runDLQ := ss.childOf(t, "RunActivity:"+contract.PublishDeadLetterActivity, startDLQ.SpanContext())
	dlqPublish := ss.childOf(t, dlqTopic+" publish", runDLQ.SpanContext())
	require.Equal(t, dlqPublish.SpanContext().SpanID(), dlqSpan.SpanID(), "traceparent names the DLQ produce span")

	// The batch's apply is its own root, linked to the record's span.
	batch := ss.one(t, "apply batch")
	require.False(t, batch.Parent().IsValid())
	require.NotEqual(t, traceID, batch.SpanContext().TraceID())
	require.Len(t, batch.Links(), 1)
	require.Equal(t, receive.SpanContext(), batch.Links()[0].SpanContext)

	// Replay from the DLQ record: the signal joins the trace under the DLQ
	// produce span, and the workflow handles it in the same trace.
	require.Eventually(t, func() bool {
		st, err := dlq.LookupState(ctx, svc.Temporal.Client, rec.Workflow.ID)
		return err == nil && st.State == contract.StateDeadLettered && !st.PendingTask
	}, time.Minute, 100*time.Millisecond, "the run waits for replay")
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: svc.Temporal.Client, TaskQueue: cfg.TaskQueue,
		Retry: cfg.Retry, Propagator: tr.TextMapPropagator(), Reason: "tracing test"})
	require.NoError(t, err)
	res, err := rp.Replay(ctx, dlq.Item{Record: rec, Key: dead.Key, Topic: dead.Topic, Partition: dead.Partition,
		Offset: dead.Offset, Headers: h})
	require.NoError(t, err)
	require.Equal(t, dlq.Signalled, res.Outcome, "%v", res.Err)
	ss = spans(sr.Started())
	signal := ss.childOf(t, "SignalWorkflow:"+contract.SignalReplay, dlqPublish.SpanContext())
	require.Eventually(t, func() bool {
		for _, s := range sr.Started() {
			if s.Name() == "HandleSignal:"+contract.SignalReplay {
				return s.Parent().SpanID() == signal.SpanContext().SpanID() && s.SpanContext().TraceID() == traceID
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the workflow handles the replay in the event's trace")
}

// TestTracingKafkaHeldEventKeepsItsTrace: with entity ordering, later
// events of a key whose head is failing are parked behind it, and the
// bridge starts their retry workflows when it releases them and they fail
// again. Each parked event's run, its attempts and its dead letter are in
// that event's own trace: the bridge parks the record's trace context and
// continues it when it starts the run.
func TestTracingKafkaHeldEventKeepsItsTrace(t *testing.T) {
	st := startTracedStack(t, "entity")
	roots := map[string]trace.Span{}
	var ids []string
	for _, name := range []string{"ev-head", "ev-held-1", "ev-held-2"} {
		id, root := st.produce(t, name)
		roots[id] = root
		ids = append(ids, id)
	}

	byEvent := map[string]*kgo.Record{}
	for _, r := range st.deadLetters(t, len(ids)) {
		rec, err := dlq.Decode(r.Value)
		require.NoError(t, err)
		env, err := rec.Envelope()
		require.NoError(t, err)
		byEvent[env.EventID] = r
	}
	for _, id := range ids {
		require.Contains(t, byEvent, id)
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(st.ctx, propagation.MapCarrier(headerMap(byEvent[id]))))
		require.True(t, sc.IsValid(), "the dead letter of %s has a traceparent", id)
		require.Equal(t, roots[id].SpanContext().TraceID(), sc.TraceID(), "the dead letter of %s carries its own event's trace", id)
	}

	// Each parked event: the bridge's apply, when its release failed, →
	// StartWorkflow → its run → its activities, all in its own trace.
	for _, id := range ids[1:] {
		var in spans
		for _, s := range st.sr.Started() {
			if s.SpanContext().TraceID() == roots[id].SpanContext().TraceID() {
				in = append(in, s)
			}
		}
		apply := in.one(t, "apply")
		require.Contains(t, apply.Attributes(), attribute.String("causet.event_id", id))
		require.Contains(t, apply.Attributes(), attribute.String("causet.workflow_id", contract.RetryWorkflowID("artist_followers", "production", id)))
		start := in.childOf(t, "StartWorkflow:"+contract.RetryWorkflowName, apply.SpanContext())
		run := in.childOf(t, "RunWorkflow:"+contract.RetryWorkflowName, start.SpanContext())
		startDLQ := in.childOf(t, "StartActivity:"+contract.PublishDeadLetterActivity, run.SpanContext())
		in.childOf(t, "RunActivity:"+contract.PublishDeadLetterActivity, startDLQ.SpanContext())
	}
}
