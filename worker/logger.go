package worker

import (
	"log/slog"

	"go.temporal.io/sdk/log"
)

// SDKLogger bridges the SDK's logs into the process's slog logger. The SDK
// logs "Activity error." at error level for every failed attempt; the
// activities already write the contract's projection_retry or
// projection_dead_lettered line for each, so the SDK's copy goes to debug
// and error-level alerts fire on real errors only.
func SDKLogger(logger *slog.Logger) log.Logger {
	return quietActivityErrors{inner: log.NewStructuredLogger(logger)}
}

type quietActivityErrors struct {
	inner log.Logger
}

func (q quietActivityErrors) Debug(msg string, keyvals ...any) { q.inner.Debug(msg, keyvals...) }
func (q quietActivityErrors) Info(msg string, keyvals ...any)  { q.inner.Info(msg, keyvals...) }
func (q quietActivityErrors) Warn(msg string, keyvals ...any)  { q.inner.Warn(msg, keyvals...) }

func (q quietActivityErrors) Error(msg string, keyvals ...any) {
	if msg == "Activity error." {
		q.inner.Debug(msg, keyvals...)
		return
	}
	q.inner.Error(msg, keyvals...)
}

// With keeps the filter on loggers the SDK derives for each task.
func (q quietActivityErrors) With(keyvals ...any) log.Logger {
	if w, ok := q.inner.(log.WithLogger); ok {
		return quietActivityErrors{inner: w.With(keyvals...)}
	}
	return q
}
