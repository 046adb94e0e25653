package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/internal/tracing"
	"github.com/causet/projection-retry/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestTracingEnabledSwitch(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{name: "nothing set: off", env: nil},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter OTLP, any case", env: map[string]string{"OTEL_TRACES_EXPORTER": "OTLP"}, on: true},
		{name: "endpoint alone", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{name: "traces endpoint alone", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{name: "exporter none beats an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "other variables alone: off", env: map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}},
		{name: "http/protobuf", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{name: "traces protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": only "http/protobuf" is supported`},
		{name: "grpc ignored while off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "other exporter refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			err: `OTEL_TRACES_EXPORTER="zipkin": only "otlp" (OTLP over HTTP) or "none" are supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, err := tracing.Enabled(lookup(c.env))
			if c.err != "" {
				require.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.on, on)
		})
	}
}

// clearOTEL unsets the variables a developer's shell may have set.
func clearOTEL(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(k, "")
	}
}

// TestTracingOffByDefault: without OTEL variables nothing is built: no hooks,
// no interceptors, a no-op provider.
func TestTracingOffByDefault(t *testing.T) {
	clearOTEL(t)
	tr, err := tracing.FromEnv(context.Background(), "causet-test")
	require.NoError(t, err)
	require.Nil(t, tr)
	require.False(t, tr.Enabled())
	require.Empty(t, tr.KafkaOpts("g"))
	ics, err := tr.TemporalInterceptors()
	require.NoError(t, err)
	require.Empty(t, ics)
	_, span := tr.TracerProvider().Tracer("t").Start(context.Background(), "x")
	require.False(t, span.IsRecording())
	require.NoError(t, tr.Shutdown(context.Background()))
}

// TestTracingExportsToOTLPEndpoint: with OTEL_EXPORTER_OTLP_ENDPOINT set,
// spans go to <endpoint>/v1/traces as OTLP/HTTP protobuf, with the resource
// of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func TestTracingExportsToOTLPEndpoint(t *testing.T) {
	clearOTEL(t)
	var (
		mu     sync.Mutex
		bodies []string
		paths  []string
		ctypes []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, paths, ctypes = append(bodies, string(b)), append(paths, r.URL.Path), append(ctypes, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "bridge-eu-1")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")

	ctx := context.Background()
	tr, err := tracing.FromEnv(ctx, "causet-bridge")
	require.NoError(t, err)
	require.True(t, tr.Enabled())
	_, span := tr.TracerProvider().Tracer("t").Start(ctx, "exported-span")
	require.True(t, span.IsRecording())
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, tr.Shutdown(sctx), "shutdown flushes the batch")

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, bodies)
	require.Equal(t, "/v1/traces", paths[0])
	require.Equal(t, "application/x-protobuf", ctypes[0])
	all := strings.Join(bodies, "")
	// Protobuf keeps strings verbatim: the span and the resource are there.
	require.Contains(t, all, "exported-span")
	require.Contains(t, all, "bridge-eu-1", "OTEL_SERVICE_NAME wins over the default")
	require.NotContains(t, all, "causet-bridge")
	require.Contains(t, all, "deployment.environment")
	require.Contains(t, all, "staging")
}

func TestTracingBadExporterFailsStart(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "jaeger")
	_, err := tracing.FromEnv(context.Background(), "causet")
	require.ErrorContains(t, err, `OTEL_TRACES_EXPORTER="jaeger"`)
}

func recorded(t *testing.T) (*tracing.Tracing, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing.New(tp, nil), sr
}

// TestTracingKafkaHeaders: a producer with the hooks writes the caller's
// trace into traceparent; a consumer with them continues it in the record's
// Context.
func TestTracingKafkaHeaders(t *testing.T) {
	tr, sr := recorded(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "traced")
	testenv.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic)}, tr.KafkaOpts("")...)...)
	require.NoError(t, err)
	defer prod.Close()
	pctx, root := tr.TracerProvider().Tracer("test").Start(ctx, "root")
	require.NoError(t, prod.ProduceSync(pctx, &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr())
	root.End()

	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, tr.KafkaOpts("group-a")...)...)
	require.NoError(t, err)
	defer cons.Close()
	var rec *kgo.Record
	for rec == nil {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		if recs := fs.Records(); len(recs) > 0 {
			rec = recs[0]
		}
	}
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
	}
	require.Contains(t, headers, "traceparent")
	got := trace.SpanContextFromContext(rec.Context)
	require.Equal(t, root.SpanContext().TraceID(), got.TraceID(), "the consumer's span continues the producer's trace")

	publish := spanNamed(t, sr, topic+" publish")
	require.Equal(t, root.SpanContext().SpanID(), publish.Parent().SpanID())
	receive := spanNamed(t, sr, topic+" receive")
	require.Equal(t, publish.SpanContext().SpanID(), receive.Parent().SpanID())
	require.Equal(t, got.SpanID(), receive.SpanContext().SpanID())

	// The same headers, read as the DLQ reader gives them, name the span.
	xctx := tr.Extract(context.Background(), headers)
	require.Equal(t, publish.SpanContext().SpanID(), trace.SpanContextFromContext(xctx).SpanID())
}

func spanNamed(t *testing.T, sr *tracetest.SpanRecorder, name string) sdktrace.ReadWriteSpan {
	t.Helper()
	for _, s := range sr.Started() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q", name)
	return nil
}

// workflowsOnly registers the worker's workflows on a replayer, which runs
// no activities.
type workflowsOnly struct{ sdkworker.WorkflowReplayer }

var _ sdkworker.Registry = workflowsOnly{}

func (workflowsOnly) RegisterActivity(any)                                         {}
func (workflowsOnly) RegisterActivityWithOptions(any, activity.RegisterOptions)    {}
func (workflowsOnly) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}
func (workflowsOnly) RegisterNexusService(*nexus.Service)                          {}

// TestTracingReplaysRecordedHistories: the recorded histories (written
// without tracing headers) replay with the tracing interceptor installed,
// which creates no activity span while replaying.
func TestTracingReplaysRecordedHistories(t *testing.T) {
	tr, sr := recorded(t)
	ics, err := tr.TemporalInterceptors()
	require.NoError(t, err)
	require.Len(t, ics, 1, "the SDK's tracing interceptor")
	var wis []interceptor.WorkerInterceptor
	for _, ic := range ics {
		wi, ok := ic.(interceptor.WorkerInterceptor)
		require.True(t, ok, "the client's interceptors are also its workers'")
		wis = append(wis, wi)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "workflows", "testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
				Interceptors: wis,
			})
			require.NoError(t, err)
			worker.Register(workflowsOnly{r}, &activities.Activities{})
			worker.RegisterRollouts(workflowsOnly{r}, &activities.Rollouts{})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
	var run int
	for _, s := range sr.Started() {
		require.False(t, strings.HasPrefix(s.Name(), "StartActivity:"), "span %s while replaying", s.Name())
		if strings.HasPrefix(s.Name(), "RunWorkflow:") {
			run++
		}
	}
	require.Positive(t, run, "the interceptor ran")
}
