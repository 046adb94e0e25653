package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/causet/projection-retry/worker"
)

type cli struct {
	Dev         devCmd         `cmd:"" help:"Run the whole stack locally: throwaway PostgreSQL, Temporal dev server with UI, in-process Kafka, runtime (CAUSET_RUNTIME_ADDR, default 127.0.0.1:8080), relay, bridge and worker (--demo submits example intents, some of whose events fail)."`
	Bridge      bridgeCmd      `cmd:"" help:"Run the Kafka bridge: apply events inline, hand failures to Temporal, commit offsets."`
	Worker      workerCmd      `cmd:"" help:"Run the Temporal worker (ApplyProjection, PublishDeadLetter, the retry and incident workflows)."`
	Projections projectionsCmd `cmd:"" help:"Validate, deploy and list projection IR documents."`
	Runtime     runtimeCmd     `cmd:"" help:"Serve the write path: POST /v1/intents decides intents and records their events in the PostgreSQL ledger (DATABASE_URL, CAUSET_RUNTIME_ADDR)."`
	Intents     intentsCmd     `cmd:"" help:"Validate, deploy and list intent handler documents."`
	DLQ         dlqCmd         `cmd:"" name:"dlq" help:"Read and replay dead letters."`
	Blocked     blockedCmd     `cmd:"" help:"List the keys entity ordering holds: each (projection, fork, entity) waiting behind its head (a retry workflow or an incident), with how many events are parked behind it."`
	Incidents   incidentsCmd   `cmd:"" help:"List, show and resolve incidents: one per systemic failure of a projection (CAUSET_INCIDENT_*)."`
	Outbox      outboxCmd      `cmd:"" help:"The events the outbox relay set aside because Kafka refuses them: list them, send them again."`
	Produce     produceCmd     `cmd:"" help:"Produce JSON-line event envelopes (FILE or stdin) to CAUSET_EVENTS_TOPIC, keyed by entityId."`
	Submit      submitCmd      `cmd:"" help:"Submit JSON-line intents (FILE or stdin) to the causet runtime at CAUSET_RUNTIME_ADDR (or --url), with the client's safe retries (its bearer token from CAUSET_RUNTIME_TOKEN); one line per outcome."`
	Bench       benchCmd       `cmd:"" help:"Measure the pipeline against the PostgreSQL ceiling, workflow mode and the in-place-retry peer in one run; write results to --out."`
	Migrate     migrateCmd     `cmd:"" help:"Apply, show and print the database's schema migrations (DATABASE_URL); every process checks the version at start."`
	Relay       relayCmd       `cmd:"" help:"Run the outbox relay: publish the ledger's unpublished events to CAUSET_EVENTS_TOPIC in order, then mark them published."`
	Version     versionCmd     `cmd:"" help:"Print this build's version, commit, build date, Go and library versions, and the schema versions it runs on."`
	CodecServer codecServerCmd `cmd:"" name:"codec-server" help:"Serve Temporal's remote codec endpoint (/decode, /encode) with the payload keys (CAUSET_PAYLOAD_KEYS or CAUSET_PAYLOAD_KEYS_FILE) on CAUSET_CODEC_ADDR (default 127.0.0.1:8081), for the Temporal UI (CAUSET_CODEC_CORS_ORIGIN) and the temporal CLI (--codec-endpoint)."`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "causet:", oneLine(err))
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
	stopTracing, err := startTracing(ctx, kctx.Command(), logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	return kctx.Run()
}

var lineBreaks = regexp.MustCompile(`:?\s*\n\s*`)

// oneLine renders err on one line, so a failed start reads the same in a
// terminal and a log collector (pgx joins the errors of each address it tried
// with line breaks). Missing search attributes keep their lines: they are
// commands to copy.
func oneLine(err error) string {
	var missing *worker.MissingSearchAttributesError
	if errors.As(err, &missing) {
		return err.Error()
	}
	return lineBreaks.ReplaceAllString(strings.TrimSpace(err.Error()), "; ")
}
