package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
)

// TestVariables: config's variables, and those recorded from the runtime,
// the relay and Temporal's envconfig.
func TestVariables(t *testing.T) {
	v := app.Variables()
	require.IsIncreasing(t, v)
	require.Subset(t, v, config.Variables())
	require.Subset(t, v, []string{
		"CAUSET_RUNTIME_ADDR", "CAUSET_RELAY_BATCH", "CAUSET_RELAY_POLL_INTERVAL",
		"TEMPORAL_CONFIG_FILE", "TEMPORAL_PROFILE", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY",
		"TEMPORAL_TLS", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_SERVER_NAME",
	})
}
