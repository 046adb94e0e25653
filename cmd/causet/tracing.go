package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/causet/projection-retry/internal/tracing"
)

// tracingShutdownTimeout bounds the export of the spans still batched when
// the command ends.
const tracingShutdownTimeout = 5 * time.Second

// startTracing installs the process's tracing from the OTEL_* variables
// (off without them) for command, whose first word names the service
// ("causet-bridge", "causet-worker", …) unless OTEL_SERVICE_NAME does. The
// returned stop exports what is left; a failed export is logged, not fatal.
func startTracing(ctx context.Context, command string, logger *slog.Logger) (stop func(), err error) {
	name := "causet"
	if f := strings.Fields(command); len(f) > 0 {
		name += "-" + f[0]
	}
	t, err := tracing.FromEnv(ctx, name)
	if err != nil {
		return nil, err
	}
	tracing.SetDefault(t)
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			logger.Warn("tracing shutdown failed: spans may be lost", "error", err.Error())
		}
	}, nil
}
