package main

import (
	"context"
	"log/slog"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/starter"
)

// bridgeCmd runs the Kafka bridge: attempt 1 inline, failures to Temporal.
type bridgeCmd struct{}

func (bridgeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	// The bridge itself is built once /metrics answers.
	return serve(ctx, logger, (*app.Service).BridgeOptions, func(ctx context.Context, svc *app.Service, opts starter.Options) error {
		b, err := starter.New(opts)
		if err != nil {
			return err
		}
		svc.WatchBridge(b)
		return b.Run(ctx)
	})
}
