// Package tracing builds the process's OpenTelemetry tracing from the
// standard OTEL_* variables and hands it, as explicit options, to the
// libraries that carry a trace across the pipeline: franz-go's kotel hooks
// (record headers), the Temporal SDK's tracing interceptor (Temporal
// headers) and the DLQ replayer (DLQ record headers).
//
// Tracing is off unless the environment asks for it (Enabled). Off, no
// exporter exists, no hook or interceptor is installed and the bridge's
// spans are no-ops: the hot path pays nothing but a nil check per batch.
//
// Neighbours: a leaf. Package app installs it on every Kafka and Temporal
// client of the process; cmd/causet sets the process default (SetDefault)
// and hands its propagator to `causet dlq replay` and `causet produce`; the
// bridge (starter/tracing.go) continues the trace of each record it reads.
// It imports no project package.
package tracing
