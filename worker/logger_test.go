package worker

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
)

func TestSDKLoggerDemotesActivityErrors(t *testing.T) {
	var buf bytes.Buffer
	l := SDKLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Error("Activity error.", "ActivityType", "ApplyProjection")
	require.Empty(t, buf.String(), "a failed attempt is not an error-level line")
	l.(log.WithLogger).With("WorkflowID", "w").Error("Activity error.", "ActivityType", "ApplyProjection")
	require.Empty(t, buf.String(), "loggers derived with With keep the filter")
	l.Error("Workflow panic", "WorkflowID", "w")
	require.Contains(t, buf.String(), `"level":"ERROR","msg":"Workflow panic"`)
}
