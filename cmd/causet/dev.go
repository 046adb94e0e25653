package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/internal/app"
	"github.com/causet/projection-retry/starter"
)

// devOut is where `causet dev` prints its banner (tests swap it).
var devOut io.Writer = os.Stdout

type devCmd struct {
	Demo bool    `help:"Feed a steady stream of example events, some of which fail (missing column, division by zero), so retries and dead letters show up in the Temporal UI within a minute."`
	Rate float64 `help:"Demo events per second." default:"3"`
}

// deadLetterQuery is the visibility query of dead-lettered retry workflows.
const deadLetterQuery = `CausetRetryState="dead_lettered"`

func (c devCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	if c.Rate <= 0 || c.Rate > 1000 {
		return fmt.Errorf("--rate=%v is invalid: want events per second from 0 (exclusive) to 1000", c.Rate)
	}
	stack, err := devstack.Start(ctx, devstack.Options{
		Topics:       []string{cfg.EventsTopic, cfg.DLQTopic},
		DefaultPorts: true,
		Logger:       logger.With("component", "devstack"),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			logger.Error("stop dev stack", "error", err.Error())
		}
		fmt.Fprintln(devOut, "causet dev: stopped everything it started and removed its temp dirs")
	}()
	cfg.DatabaseURL, cfg.KafkaBrokers = stack.DatabaseURL, stack.KafkaBrokers

	// The service of `causet worker` and `causet bridge`, on this stack: the
	// examples deployed before the engine reads the catalog, and Temporal
	// the dev server started here (or TEMPORAL_* via envconfig).
	var deployed []devstack.Deployed
	opts := []app.Option{app.WithLogger(logger), app.WithSetup(func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		deployed, err = devstack.SetupExamples(ctx, pool, c.Demo)
		return err
	})}
	if stack.Temporal != nil {
		opts = append(opts, app.WithTemporalAddress(stack.Temporal.HostPort))
	}
	svc, err := app.Open(ctx, cfg, opts...)
	if err != nil {
		return err
	}
	defer svc.Close()
	w, err := svc.NewWorker()
	if err != nil {
		return err
	}
	bridge, err := svc.NewBridge()
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	fail := func(what string, err error) {
		if err != nil && runCtx.Err() == nil {
			cancel(fmt.Errorf("%s: %w", what, err))
		}
	}
	wg.Go(func() { fail("worker", w.Run(interruptOn(runCtx))) })
	wg.Go(func() { fail("bridge", bridge.Run(runCtx)) })

	cli := temporalCLIName(stack)
	printDevBanner(devOut, c, cfg, stack, deployed, svc.Temporal.Namespace, cli)
	if c.Demo {
		wg.Go(func() { fail("demo feeder", feedDemo(runCtx, cfg, c.Rate, logger)) })
		wg.Go(func() { announceFirstDeadLetter(runCtx, svc.Temporal, devOut, stack, cli) })
	}

	<-runCtx.Done()
	cause := context.Cause(runCtx)
	cancel(nil)
	fmt.Fprintln(devOut, "causet dev: stopping...")
	wg.Wait()
	if ctx.Err() != nil { // Ctrl-C: a clean stop
		return nil
	}
	return cause
}

// temporalCLIName is how the banner spells the temporal CLI: ./bin/temporal
// relative to the working directory when that is the one found, else
// "temporal".
func temporalCLIName(stack *devstack.Stack) string {
	if stack.Temporal == nil {
		return "temporal"
	}
	wd, err := os.Getwd()
	if err != nil {
		return "temporal"
	}
	rel, err := filepath.Rel(wd, stack.Temporal.CLI)
	if err != nil || strings.HasPrefix(rel, "..") {
		if filepath.Base(stack.Temporal.CLI) == "temporal" {
			return "temporal"
		}
		return stack.Temporal.CLI
	}
	return "./" + rel
}

// causetName is how the banner spells this program so that the printed
// commands work as printed: ./bin/causet (or another path) as it was
// started, "go run ./cmd/causet" under go run, "causet" when on PATH.
func causetName() string {
	exe := os.Args[0]
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/causet"
	}
	if !strings.ContainsRune(exe, filepath.Separator) {
		return exe
	}
	if wd, err := os.Getwd(); err == nil {
		if abs, err := filepath.Abs(exe); err == nil {
			if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
				return "./" + rel
			}
		}
	}
	return exe
}

// addressFlag is the --address flag the temporal CLI needs for the dev
// server ("" when it listens on the CLI's default, or when the server is
// TEMPORAL_ADDRESS, which the CLI reads itself).
func addressFlag(stack *devstack.Stack) string {
	if stack.Temporal == nil || stack.Temporal.HostPort == fmt.Sprintf("127.0.0.1:%d", devstack.DefaultTemporalPort) {
		return ""
	}
	return " --address " + stack.Temporal.HostPort
}

func signalLine(cli, addr, workflowID string) string {
	return fmt.Sprintf(`%s workflow signal%s --workflow-id '%s' --name replay --input '{"reason":"fixed"}'`, cli, addr, workflowID)
}

func printDevBanner(out io.Writer, c devCmd, cfg config.Config, stack *devstack.Stack, deployed []devstack.Deployed, namespace, cli string) {
	origin := func(started bool, env string) string {
		if started {
			return "started here, stopped on Ctrl-C"
		}
		return "from " + env
	}
	addr := addressFlag(stack)
	var b strings.Builder
	fmt.Fprintf(&b, "\ncauset dev is running. Ctrl-C stops everything it started.\n\n")
	dbShown := "(DATABASE_URL)"
	if stack.Postgres != nil {
		dbShown = stack.DatabaseURL
	}
	fmt.Fprintf(&b, "  PostgreSQL    %s  [%s]\n", dbShown, origin(stack.Postgres != nil, "DATABASE_URL"))
	if stack.Temporal != nil {
		fmt.Fprintf(&b, "  Temporal      %s  namespace %s  [%s]\n", stack.Temporal.HostPort, namespace, origin(true, ""))
	} else {
		fmt.Fprintf(&b, "  Temporal      %s  namespace %s  [%s]\n", os.Getenv("TEMPORAL_ADDRESS"), namespace, origin(false, "TEMPORAL_ADDRESS"))
	}
	fmt.Fprintf(&b, "  Kafka         %s  topics %s, %s  [%s]\n", strings.Join(stack.KafkaBrokers, ","), cfg.EventsTopic, cfg.DLQTopic,
		origin(stack.Kafka != nil, "KAFKA_BROKERS"))
	for _, d := range deployed {
		state := "deployed"
		if !d.New {
			state = "already deployed"
		}
		fmt.Fprintf(&b, "  Projection    %s version %d (%s)\n", d.Name, d.Version, state)
	}
	fmt.Fprintf(&b, "  Bridge        group %s, mode %s; worker on task queue %s\n\n", cfg.ConsumerGroup, cfg.BridgeMode, cfg.TaskQueue)

	q := url.QueryEscape(deadLetterQuery)
	if stack.TemporalUI != "" {
		fmt.Fprintf(&b, "Temporal UI:\n  %s/namespaces/%s/workflows\n", stack.TemporalUI, namespace)
		fmt.Fprintf(&b, "Dead letters in the UI:\n  %s/namespaces/%s/workflows?query=%s\n", stack.TemporalUI, namespace, q)
	} else {
		fmt.Fprintf(&b, "Temporal UI: that of TEMPORAL_ADDRESS's cluster; dead letters: its workflows page with ?query=%s\n", q)
	}
	fmt.Fprintf(&b, "Dead letters on the command line:\n  %s workflow list%s --query '%s'\n", cli, addr, deadLetterQuery)
	fmt.Fprintf(&b, "Replay one (after fixing the cause):\n  %s\n\n", signalLine(cli, addr, "projection-retry:<projection>:<forkId>:<eventId>"))

	fmt.Fprintf(&b, "Other shells reach this stack with:\n")
	if stack.Postgres != nil {
		fmt.Fprintf(&b, "  export DATABASE_URL='%s'\n", stack.DatabaseURL)
	}
	if stack.Temporal != nil && addr != "" {
		fmt.Fprintf(&b, "  export TEMPORAL_ADDRESS=%s\n", stack.Temporal.HostPort)
	}
	if stack.Kafka != nil {
		fmt.Fprintf(&b, "  export KAFKA_BROKERS=%s\n", strings.Join(stack.KafkaBrokers, ","))
	}
	self := causetName()
	fmt.Fprintf(&b, "  %s produce events.jsonl      # JSON lines -> %s\n", self, cfg.EventsTopic)
	if c.Demo {
		fmt.Fprintf(&b, "\nDemo: %.3g events/s. ARTIST_FOLLOWED fails (artist_followers was created without followed_at:\n", c.Rate)
		fmt.Fprintf(&b, "column \"followed_at\" does not exist) and TRACK_PLAYED with days 0 fails (division by zero).\n")
		fmt.Fprintf(&b, "Each failure is retried at +1s, +3s, +7s, +15s, then dead-lettered (~15 s after it first fails).\n")
		fmt.Fprintf(&b, "Fix the schema, then replay:\n  psql \"$DATABASE_URL\" -c '%s'\n", devstack.FixFollowersSQL)
		fmt.Fprintf(&b, "Division by zero needs a new IR version (e.g. plays_per_day: \"event.payload.days == 0 ? 0 : event.payload.plays / event.payload.days\"):\n")
		fmt.Fprintf(&b, "  %s projections deploy artist_stats.yaml\n", self)
	}
	fmt.Fprintln(out, b.String())
}

// feedDemo produces the demo stream to the events topic at rate events/s
// until ctx is done.
func feedDemo(ctx context.Context, cfg config.Config, rate float64, logger *slog.Logger) error {
	cl, err := app.NewKafkaClient(cfg,
		kgo.DefaultProduceTopic(cfg.EventsTopic),
		kgo.WithLogger(starter.KafkaLogger(logger)),
	)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	runID := time.Now().UTC().Format("150405")
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		ev := devstack.DemoEvent(runID, i, time.Now())
		value, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(ev.EntityID), Value: value}).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Warn("demo event not produced", "eventId", ev.EventID, "error", err.Error())
			continue
		}
		logger.Debug("demo event produced", "eventId", ev.EventID, "eventType", ev.EventType, "entityId", ev.EntityID)
	}
}

// announceFirstDeadLetter waits for the first dead-lettered workflow and
// prints its ready-to-paste replay line.
func announceFirstDeadLetter(ctx context.Context, tc *app.Temporal, out io.Writer, stack *devstack.Stack, cli string) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := tc.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: tc.Namespace, Query: deadLetterQuery, PageSize: 1,
		})
		if err != nil || len(resp.GetExecutions()) == 0 {
			continue
		}
		id := resp.GetExecutions()[0].GetExecution().GetWorkflowId()
		fmt.Fprintf(out, "\nFirst dead letter: %s\nReplay it once the cause is fixed:\n  %s\n\n", id, signalLine(cli, addressFlag(stack), id))
		return
	}
}
