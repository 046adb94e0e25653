package app

import (
	"os"
	"slices"

	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/relay"
)

// VariablePrefixes are families of variables read by prefix: Temporal's
// gRPC metadata, TEMPORAL_GRPC_META_<NAME>, and OpenTelemetry's OTEL_*
// (internal/tracing, the OTLP exporter and the SDK read them).
var VariablePrefixes = []string{"TEMPORAL_GRPC_META_", "OTEL_"}

// Variables returns the name of every environment variable that `causet
// worker`, `bridge`, `runtime` and `relay` read, sorted: config.Variables(),
// CAUSET_RUNTIME_ADDR and CAUSET_RUNTIME_AUTH, _TOKENS_FILE, _TOKENS
// (intentapi.AddrFromEnv, AuthFromEnv), CAUSET_RELAY_* (relay.LoadSettings)
// and the Temporal client's TEMPORAL_* (contrib/envconfig, as DialTemporal
// reads them), beside the families of VariablePrefixes. All but config's are
// recorded from their readers with an empty environment, so the list cannot
// drift from the code; deployment files are checked against it.
func Variables() []string {
	seen := map[string]bool{}
	for _, v := range config.Variables() {
		seen[v] = true
	}
	record := func(k string) (string, bool) { seen[k] = true; return "", false }
	_, _ = intentapi.AddrFromEnv(record)
	_, _ = intentapi.AuthFromEnv(record)
	_, _ = relay.LoadSettings(record)
	_, _ = envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{EnvLookup: recordEnv(record)})
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// recordEnv is an envconfig.EnvLookup that records the names asked for and
// points TEMPORAL_CONFIG_FILE at an empty file, so no file is read.
type recordEnv func(string) (string, bool)

func (r recordEnv) Environ() []string { return nil }

func (r recordEnv) LookupEnv(k string) (string, bool) {
	r(k)
	if k == "TEMPORAL_CONFIG_FILE" {
		return os.DevNull, true
	}
	return "", false
}
