// Command causet runs Causet's projection worker on Temporal and its tooling.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

type cli struct {
	Worker      workerCmd      `cmd:"" help:"Run the Temporal worker (ApplyProjection, PublishDeadLetter, ProjectionRetryWorkflow)."`
	Projections projectionsCmd `cmd:"" help:"Validate, deploy and list projection IR documents."`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "causet:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var c cli
	parser, err := kong.New(&c,
		kong.Name("causet"),
		kong.Description("Causet projection retries on Temporal."),
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.Bind(logger),
	)
	if err != nil {
		return err
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		return err
	}
	return kctx.Run()
}
