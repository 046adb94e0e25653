package starter

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// KafkaLogger is the franz-go logger of every Kafka client of the process:
// the client's own INFO lines (metadata updates, group joins) are routine
// and go to debug; its warnings and errors stay as they are.
func KafkaLogger(logger *slog.Logger) kgo.Logger {
	return kslog.New(slog.New(demoteInfo{logger.With("component", "kgo").Handler()}))
}

// demoteInfo logs INFO records at DEBUG.
type demoteInfo struct{ slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (h demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoteInfo) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoteInfo{h.Handler.WithAttrs(attrs)}
}

func (h demoteInfo) WithGroup(name string) slog.Handler { return demoteInfo{h.Handler.WithGroup(name)} }
