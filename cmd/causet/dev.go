package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/relay"
)

// devOut is where `causet dev` prints its banner (tests swap it).
var devOut io.Writer = os.Stdout

type devCmd struct {
	Demo bool    `help:"Submit a steady stream of example intents to the runtime, some of whose events fail (missing column, division by zero), so retries and dead letters show up in the Temporal UI within a minute."`
	Rate float64 `help:"Demo intents per second." default:"3"`
}

// deadLetterQuery is the visibility query of dead-lettered retry workflows.
const deadLetterQuery = `CausetRetryState="dead_lettered"`

func (c devCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	if c.Rate <= 0 || c.Rate > 1000 {
		return fmt.Errorf("--rate=%v is invalid: want intents per second from 0 (exclusive) to 1000", c.Rate)
	}
	rtAddr, err := intentapi.AddrFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	_, rtAddrSet := os.LookupEnv("CAUSET_RUNTIME_ADDR")
	relaySettings, err := relay.LoadSettings(os.LookupEnv)
	if err != nil {
		return err
	}
	codec, err := listenDevCodec(os.LookupEnv)
	if err != nil {
		return err
	}
	defer codec.close() // when it never served; after serving, a no-op
	stack, err := devstack.Start(ctx, devstack.Options{
		Topics:          []string{cfg.EventsTopic, cfg.DLQTopic},
		DefaultPorts:    true,
		Logger:          logger.With("component", "devstack"),
		UICodecEndpoint: codec.endpoint(),
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
	// A development stack migrates its database unless told not to.
	if _, set := os.LookupEnv("CAUSET_AUTO_MIGRATE"); !set {
		cfg.AutoMigrate = true
	}

	// The service of `causet worker`, `causet bridge`, `causet runtime` and
	// `causet relay`, on this stack: the example projections and intent
	// handlers deployed before the engine and the runtime read their
	// catalogs, and Temporal the dev server started here (or TEMPORAL_* via
	// envconfig).
	var projections, handlers []devstack.Deployed
	opts := []app.Option{app.WithLogger(logger), app.WithSetup(func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		if projections, err = devstack.SetupExamples(ctx, pool, c.Demo); err != nil {
			return err
		}
		handlers, err = devstack.SetupExampleIntents(ctx, pool, c.Demo, intents.WithCostLimit(cfg.IRCostLimit))
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
	runID := time.Now().UTC().Format("150405")
	rtLogger := logger
	if c.Demo {
		rtLogger = slog.New(demoIntentLogs{Handler: logger.Handler(), prefix: "demo-" + runID + "-"})
	}
	rt, err := svc.NewRuntime(ctx, app.RuntimeOptions{Addr: rtAddr, Logger: rtLogger})
	if err != nil {
		return err
	}
	ln, err := listenRuntime(rt, rtAddrSet, logger)
	if err != nil {
		return err
	}
	rl, err := svc.NewRelay(relaySettings)
	if err != nil {
		ln.Close()
		return err
	}
	base := runtimeBaseURL(ln.Addr())

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
	wg.Go(func() { fail("runtime", rt.Serve(runCtx, ln)) })
	wg.Go(func() { fail("relay", rl.Run(runCtx)) })
	if codec != nil {
		wg.Go(func() {
			fail("codec server", codec.serve(runCtx, stack.TemporalUI, logger.With("component", "codec-server")))
		})
	}

	cli := temporalCLIName(stack)
	printDevBanner(devOut, devBanner{
		demo: c.Demo, rate: c.Rate, cfg: cfg, stack: stack, projections: projections, handlers: handlers,
		namespace: svc.Temporal.Namespace, cli: cli, self: causetName(),
		runtimeURL: base, runtimeDefault: ln.Addr().String() == intentapi.DefaultAddr,
		codecURL: codec.endpoint(), codecKey: codec.currentKey(),
	})
	if c.Demo {
		cl := client.New(base)
		wg.Go(func() { fail("demo feeder", feedDemo(runCtx, cl, runID, c.Rate, logger)) })
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

// listenRuntime listens on the runtime's address. When CAUSET_RUNTIME_ADDR
// is not set and the default address is taken, a free port of 127.0.0.1 is
// used instead (the banner shows it), as devstack does for Temporal and
// Kafka; an address that was set must be free.
func listenRuntime(rt *app.Runtime, addrSet bool, logger *slog.Logger) (net.Listener, error) {
	ln, err := rt.Listen()
	if err == nil || addrSet {
		return ln, err
	}
	ln, ferr := net.Listen("tcp", "127.0.0.1:0")
	if ferr != nil {
		return nil, err
	}
	logger.Warn("runtime address taken, using a free port", "wanted", rt.Addr, "addr", ln.Addr().String(), "error", err.Error())
	return ln, nil
}

// runtimeBaseURL is the URL clients reach the runtime listening on addr
// at: an unspecified host (0.0.0.0, ::) is reached on 127.0.0.1.
func runtimeBaseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// demoIntentLogs lowers the runtime's intent_outcome lines of the demo's own
// intents (IDs starting with prefix) to DEBUG, so that the demo's few a
// second do not drown the projection_retry lines; intents submitted from
// outside keep their INFO line.
type demoIntentLogs struct {
	slog.Handler
	prefix string
}

func (h demoIntentLogs) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "intent_outcome" && r.Level > slog.LevelDebug && h.demo(r) {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h demoIntentLogs) demo(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "intentId" {
			found = strings.HasPrefix(a.Value.String(), h.prefix)
			return false
		}
		return true
	})
	return found
}

func (h demoIntentLogs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoIntentLogs{Handler: h.Handler.WithAttrs(attrs), prefix: h.prefix}
}

func (h demoIntentLogs) WithGroup(name string) slog.Handler {
	return demoIntentLogs{Handler: h.Handler.WithGroup(name), prefix: h.prefix}
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

// incidentQuery lists the incidents in the UI.
const incidentQuery = `WorkflowType="ProjectionIncidentWorkflow"`

// uiColumnsHint tells where the Temporal UI shows each failure's story: the
// list shows search attributes as columns once added (its column picker
// keeps them per browser), a run's page its summary and details.
const uiColumnsHint = "(list: the gear icon adds the columns " + uiColumnNames + "; a run: its User Metadata tab says what failed, where it stands and how to replay it)"

// uiColumnNames are the search attributes worth a column in the list.
const uiColumnNames = "CausetRetryState, CausetIncidentState, CausetProjection, CausetEventType, CausetEntityId, CausetError"

func signalLine(cli, addr, workflowID string) string {
	return fmt.Sprintf(`%s workflow signal%s --workflow-id '%s' --name replay --input '{"reason":"fixed"}'`, cli, addr, workflowID)
}

// devBanner is what the banner of `causet dev` shows.
type devBanner struct {
	demo        bool
	rate        float64
	cfg         config.Config
	stack       *devstack.Stack
	projections []devstack.Deployed
	handlers    []devstack.Deployed
	namespace   string
	// cli and self are how the temporal CLI and this program are spelled.
	cli, self string
	// runtimeURL is the runtime's base URL; runtimeDefault is set when it
	// listens on intentapi.DefaultAddr, where `causet submit` looks without
	// flags.
	runtimeURL     string
	runtimeDefault bool
	// codecURL is the codec server started beside the dev server (payload
	// encryption on), codecKey the key ID it encrypts with; empty without.
	codecURL, codecKey string
}

// Example intents of the banner: the curl line's, with a fixed intentId so
// that pasting it again shows the recorded answer, and the submit line's.
const (
	exampleIntentID = "hello-1"
	exampleCurlBody = `{"intentId":"` + exampleIntentID + `","intentType":"FollowArtist","entityId":"fan-1","forkId":"production","payload":{"artistId":"artist-1"}}`
	exampleSubmit   = `{"intentType":"PlayTrack","entityId":"listener-1","forkId":"production","payload":{"artistId":"artist-1","trackId":"track-1","plays":3,"days":1}}`
)

// bannerCurlLine is the banner's ready-to-paste POST of a FollowArtist intent.
func bannerCurlLine(base string) string {
	return fmt.Sprintf(`curl -sS -X POST %s/v1/intents -H 'Content-Type: application/json' -d '%s'`, base, exampleCurlBody)
}

// bannerSubmitLine is the banner's `causet submit` of one PlayTrack intent.
func bannerSubmitLine(self, base string, defaultAddr bool) string {
	url := ""
	if !defaultAddr {
		url = " --url " + base
	}
	return fmt.Sprintf(`echo '%s' | %s submit%s`, exampleSubmit, self, url)
}

func deployedState(d devstack.Deployed) string {
	state := "deployed"
	if !d.New {
		state = "already deployed"
	}
	if d.Note != "" {
		state += "; " + d.Note
	}
	return state
}

func printDevBanner(out io.Writer, v devBanner) {
	origin := func(started bool, env string) string {
		if started {
			return "started here, stopped on Ctrl-C"
		}
		return "from " + env
	}
	cfg, stack, cli, self := v.cfg, v.stack, v.cli, v.self
	addr := addressFlag(stack)
	var b strings.Builder
	fmt.Fprintf(&b, "\ncauset dev is running. Ctrl-C stops everything it started.\n\n")
	dbShown := "(DATABASE_URL)"
	if stack.Postgres != nil {
		dbShown = stack.DatabaseURL
	}
	fmt.Fprintf(&b, "  PostgreSQL    %s  [%s]\n", dbShown, origin(stack.Postgres != nil, "DATABASE_URL"))
	if stack.Temporal != nil {
		fmt.Fprintf(&b, "  Temporal      %s  namespace %s  [%s]\n", stack.Temporal.HostPort, v.namespace, origin(true, ""))
	} else {
		fmt.Fprintf(&b, "  Temporal      %s  namespace %s  [%s]\n", os.Getenv("TEMPORAL_ADDRESS"), v.namespace, origin(false, "TEMPORAL_ADDRESS"))
	}
	if v.codecURL != "" {
		fmt.Fprintf(&b, "  Codec server  %s  payloads are encrypted (key %s); the UI decodes them here  [%s]\n", v.codecURL, v.codecKey, origin(true, ""))
	}
	fmt.Fprintf(&b, "  Kafka         %s  topics %s, %s  [%s]\n", strings.Join(stack.KafkaBrokers, ","), cfg.EventsTopic, cfg.DLQTopic,
		origin(stack.Kafka != nil, "KAFKA_BROKERS"))
	fmt.Fprintf(&b, "  Runtime       %s  POST /v1/intents, GET /v1/intents/{intentId}, /metrics\n", v.runtimeURL)
	for _, d := range v.handlers {
		fmt.Fprintf(&b, "  Intent        %s version %d (%s)\n", d.Name, d.Version, deployedState(d))
	}
	fmt.Fprintf(&b, "  Relay         ledger events -> %s\n", cfg.EventsTopic)
	for _, d := range v.projections {
		fmt.Fprintf(&b, "  Projection    %s version %d (%s)\n", d.Name, d.Version, deployedState(d))
	}
	fmt.Fprintf(&b, "  Bridge        group %s, mode %s; worker on task queue %s\n\n", cfg.ConsumerGroup, cfg.BridgeMode, cfg.TaskQueue)

	fmt.Fprintf(&b, "Submit an intent: the runtime records it with its event, the relay publishes the event, the bridge applies it:\n")
	fmt.Fprintf(&b, "  %s\n", bannerCurlLine(v.runtimeURL))
	fmt.Fprintf(&b, "Its status (pasting the POST again answers the same, recorded once):\n  curl -sS %s/v1/intents/%s\n", v.runtimeURL, exampleIntentID)
	fmt.Fprintf(&b, "JSON lines, with the client's retries:\n  %s\n\n", bannerSubmitLine(self, v.runtimeURL, v.runtimeDefault))

	q := url.QueryEscape(deadLetterQuery)
	if stack.TemporalUI != "" {
		fmt.Fprintf(&b, "Temporal UI:\n  %s/namespaces/%s/workflows\n", stack.TemporalUI, v.namespace)
		fmt.Fprintf(&b, "Dead letters in the UI:\n  %s/namespaces/%s/workflows?query=%s\n", stack.TemporalUI, v.namespace, q)
		fmt.Fprintf(&b, "  %s\n", uiColumnsHint)
	} else {
		fmt.Fprintf(&b, "Temporal UI: that of TEMPORAL_ADDRESS's cluster; dead letters: its workflows page with ?query=%s\n", q)
	}
	fmt.Fprintf(&b, "Dead letters on the command line:\n  %s workflow list%s --query '%s'\n", cli, addr, deadLetterQuery)
	if v.codecURL != "" {
		fmt.Fprintf(&b, "One with its payloads decoded:\n  %s workflow show%s --codec-endpoint %s -w projection-retry:<projection>:<forkId>:<eventId>\n", cli, addr, v.codecURL)
	}
	fmt.Fprintf(&b, "Replay one (after fixing the cause):\n  %s\n", signalLine(cli, addr, "projection-retry:<projection>:<forkId>:<eventId>"))
	fmt.Fprintf(&b, "Incidents (one failure across %d events within %s; CAUSET_INCIDENT_POLICY=%s):\n  %s incidents list\n", cfg.Incidents.Threshold, cfg.Incidents.Window, cfg.Incidents.Policy, self)
	if stack.TemporalUI != "" {
		fmt.Fprintf(&b, "  %s/namespaces/%s/workflows?query=%s\n", stack.TemporalUI, v.namespace, url.QueryEscape(incidentQuery))
	}
	b.WriteString("\n")

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
	if !v.runtimeDefault {
		fmt.Fprintf(&b, "  export CAUSET_RUNTIME_ADDR=%s\n", strings.TrimPrefix(v.runtimeURL, "http://"))
	}
	fmt.Fprintf(&b, "  %s produce events.jsonl      # JSON lines -> %s, bypassing the runtime\n", self, cfg.EventsTopic)
	if v.demo {
		fmt.Fprintf(&b, "\nDemo: %.3g intents/s to the runtime. Of every 10, 7 PlayTrack are applied and 1 UnfollowArtist is rejected\n", v.rate)
		fmt.Fprintf(&b, "(rule following: nothing written). 1 FollowArtist's ARTIST_FOLLOWED fails: artist_followers was created without\n")
		fmt.Fprintf(&b, "followed_at (column \"followed_at\" does not exist; the curl above fails the same way). 1 PlayTrack has days 0:\n")
		fmt.Fprintf(&b, "PlayTrack is deployed without its %s rule, so it is accepted and its TRACK_PLAYED fails (division by zero).\n", devstack.DemoDroppedRule)
		fmt.Fprintf(&b, "Each failure is retried at +1s, +3s, +7s, +15s, then dead-lettered (~15 s after it first fails).\n")
		fmt.Fprintf(&b, "Fix the schema, then replay:\n  psql \"$DATABASE_URL\" -c '%s'\n", devstack.FixFollowersSQL)
		fmt.Fprintf(&b, "Division by zero needs a new IR version (e.g. plays_per_day: \"event.payload.days == 0 ? 0 : event.payload.plays / event.payload.days\"):\n")
		fmt.Fprintf(&b, "try it on the failing events (nothing written), then deploy it and replay what it fixes as one workflow:\n")
		fmt.Fprintf(&b, "  %s projections check artist_stats.yaml\n  %s projections rollout artist_stats.yaml\n", self, self)
		fmt.Fprintf(&b, "and the example PlayTrack handler rejects days 0 before anything is written:\n")
		fmt.Fprintf(&b, "  %s intents deploy %s\n", self, examplePlayTrackPath())
	}
	fmt.Fprintln(out, b.String())
}

// examplePlayTrackPath is examples/intents/PlayTrack.yaml relative to the
// working directory when it is there (the repository's root), else the
// repository path with a note.
func examplePlayTrackPath() string {
	const p = "examples/intents/PlayTrack.yaml"
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "PlayTrack.yaml   # " + p + " of the repository"
}

// feedDemo submits the demo intents (devstack.DemoIntent) through cl at rate
// intents/s until ctx is done, logging a summary every 30 s. A failed
// submission (after the client's retries) is logged and skipped.
func feedDemo(ctx context.Context, cl *client.Client, runID string, rate float64, logger *slog.Logger) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	report := time.NewTicker(30 * time.Second)
	defer report.Stop()
	var succeeded, rejected, failed int
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-report.C:
			logger.Info("demo intents", "event", "demo_intents", "submitted", i, "succeeded", succeeded, "rejected", rejected, "failed", failed)
			continue
		case <-tick.C:
		}
		in := devstack.DemoIntent(runID, i)
		i++
		res, err := cl.Submit(ctx, in)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			failed++
			logger.Warn("demo intent not submitted", "intentId", in.IntentID, "intentType", in.IntentType, "error", err.Error())
		case res.Status == client.ResultRejected:
			rejected++
			logger.Debug("demo intent rejected", "intentId", in.IntentID, "intentType", in.IntentType, "rule", res.Rule)
		default:
			succeeded++
			logger.Debug("demo intent accepted", "intentId", in.IntentID, "intentType", in.IntentType, "events", len(res.Events))
		}
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
