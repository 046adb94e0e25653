package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// The variables that decide whether tracing is on (Enabled). The OTLP
// exporter, the SDK's sampler, batcher and limits, and the resource read
// the other OTEL_* variables themselves.
const (
	EnvSDKDisabled          = "OTEL_SDK_DISABLED"
	EnvTracesExporter       = "OTEL_TRACES_EXPORTER"
	EnvEndpoint             = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint       = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol             = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol       = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	protocolHTTPProtobuf    = "http/protobuf"
	exporterOTLP            = "otlp"
	exporterNone            = "none"
	temporalInstrumentation = "temporal-sdk-go"
)

// Tracing is a tracer provider with the propagator that carries its spans
// across processes. A nil *Tracing is off.
type Tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// Propagator is W3C Trace Context (traceparent, tracestate) with W3C
// Baggage: what every Kafka record and Temporal header carries.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// New is tracing on tp, propagated with prop (nil: Propagator()). Shutdown
// leaves tp alone: its owner shuts it down.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator) *Tracing {
	if prop == nil {
		prop = Propagator()
	}
	return &Tracing{provider: tp, propagator: prop}
}

// Enabled reports whether the environment (lookup) turns tracing on:
// OTEL_TRACES_EXPORTER=otlp, or OTEL_TRACES_EXPORTER unset and an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set. OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
// Only OTLP over HTTP (http/protobuf) is built in: another exporter or
// protocol is an error, never silently replaced.
func Enabled(lookup func(string) (string, bool)) (bool, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get(EnvSDKDisabled), "true") {
		return false, nil
	}
	on := false
	switch exp := get(EnvTracesExporter); strings.ToLower(exp) {
	case exporterNone:
		return false, nil
	case exporterOTLP:
		on = true
	case "":
		on = get(EnvEndpoint) != "" || get(EnvTracesEndpoint) != ""
	default:
		return false, fmt.Errorf("%s=%q: only %q (OTLP over HTTP) or %q are supported", EnvTracesExporter, exp, exporterOTLP, exporterNone)
	}
	if !on {
		return false, nil
	}
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if p := get(k); p != "" {
			if p != protocolHTTPProtobuf {
				return false, fmt.Errorf("%s=%q: only %q is supported", k, p, protocolHTTPProtobuf)
			}
			break // the traces-specific one wins
		}
	}
	return true, nil
}

// FromEnv builds tracing from the process's environment (Enabled). On, spans
// are batched to the OTLP/HTTP exporter, which reads
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION and
// the TLS files itself; the SDK reads OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*
// and OTEL_SPAN_*_LIMIT. The resource is service.name serviceName, overridden
// by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, with the SDK's and the
// host's attributes. Off: nil, which every method treats as off.
func FromEnv(ctx context.Context, serviceName string) (*Tracing, error) {
	on, err := Enabled(os.LookupEnv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // after the default: OTEL_SERVICE_NAME wins
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp, nil)
	t.shutdown = tp.Shutdown
	return t, nil
}

// Enabled reports whether t traces.
func (t *Tracing) Enabled() bool { return t != nil }

// TracerProvider is t's provider; a no-op one when off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.provider
}

// TextMapPropagator is t's propagator (Propagator() when off, so a context
// can still be read from headers).
func (t *Tracing) TextMapPropagator() propagation.TextMapPropagator {
	if t == nil {
		return Propagator()
	}
	return t.propagator
}

// Shutdown exports the spans still batched and stops the exporter (nothing
// when off or built by New).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// KafkaOpts are the kotel hooks of a Kafka client: a producer starts a
// "<topic> publish" span, child of the record's Context, and writes it into
// the record's traceparent/tracestate headers; a consumer reads them into a
// "<topic> receive" span put in each fetched record's Context. group, when
// set, is the consumer group attribute. None when off.
func (t *Tracing) KafkaOpts(group string) []kgo.Opt {
	if t == nil {
		return nil
	}
	opts := []kotel.TracerOpt{kotel.TracerProvider(t.provider), kotel.TracerPropagator(t.propagator)}
	if group != "" {
		opts = append(opts, kotel.ConsumerGroup(group))
	}
	k := kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(opts...)))
	return []kgo.Opt{kgo.WithHooks(k.Hooks()...)}
}

// TemporalInterceptors are the Temporal client's interceptors: the SDK's
// OpenTelemetry tracing interceptor, which spans workflow starts, signals
// and updates and carries them in Temporal headers, and — as a worker
// interceptor of the client's workers — spans workflows and activities
// (workflow spans only when not replaying). None when off.
func (t *Tracing) TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	if t == nil {
		return nil, nil
	}
	tracer, err := temporalotel.NewTracer(temporalotel.TracerOptions{
		Tracer:            t.provider.Tracer(temporalInstrumentation),
		TextMapPropagator: t.propagator,
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{interceptor.NewTracingInterceptor(tracer)}, nil
}

// Extract returns ctx with the span context carried in headers (a Kafka
// record's, as strings), so that what is done with it joins that trace.
func (t *Tracing) Extract(ctx context.Context, headers map[string]string) context.Context {
	return t.TextMapPropagator().Extract(ctx, propagation.MapCarrier(headers))
}

var process atomic.Pointer[Tracing]

// Default is the tracing SetDefault installed: the process's, off until then.
func Default() *Tracing { return process.Load() }

// SetDefault makes t the process's tracing (Default) and, when it is on,
// OpenTelemetry's global provider and propagator, for code that reads only
// those.
func SetDefault(t *Tracing) {
	process.Store(t)
	if t != nil {
		otel.SetTracerProvider(t.provider)
		otel.SetTextMapPropagator(t.propagator)
	}
}
