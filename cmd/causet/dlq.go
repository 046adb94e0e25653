package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/tracing"
)

// dlqOut is where the dlq subcommands print (tests swap it).
var dlqOut io.Writer = os.Stdout

type dlqCmd struct {
	Tail   dlqTailCmd   `cmd:"" help:"Show dead letters from CAUSET_DLQ_TOPIC with their workflow's current state."`
	Replay dlqReplayCmd `cmd:"" help:"Replay dead letters: signal open dead-lettered workflows, restart closed ones."`
}

// dlqSelect are the flags shared by tail and replay.
type dlqSelect struct {
	Projection string `help:"Only this projection."`
	EventType  string `name:"event-type" help:"Only this event type."`
	Fork       string `help:"Only this fork ID."`
	ErrorKind  string `name:"error-kind" help:"Only this error kind (sql, ir_eval, connection, invalid_event)."`
	Since      string `help:"Only records dead-lettered at or after this time: RFC 3339 (2026-12-02T12:00:00Z) or a duration ago (2h)."`
	Until      string `help:"Only records dead-lettered before this time: RFC 3339 or a duration ago."`
	FromOffset string `name:"from-offset" help:"Start at this offset: N on every partition, or P:N[,P:N...] for listed partitions only."`
}

func (s dlqSelect) readerOptions(cfg config.Config, follow bool, now time.Time) (dlq.ReaderOptions, error) {
	o := dlq.ReaderOptions{
		Brokers: cfg.KafkaBrokers,
		Topic:   cfg.DLQTopic,
		Follow:  follow,
		Filter: dlq.Filter{
			Projection: s.Projection, EventType: s.EventType, ForkID: s.Fork, ErrorKind: s.ErrorKind,
		},
	}
	var err error
	if o.ClientOpts, err = app.KafkaConnOpts(cfg.KafkaSecurity, cfg.LinkTimeout); err != nil {
		return o, err
	}
	if o.Filter.Since, err = parseWhen("--since", s.Since, now); err != nil {
		return o, err
	}
	if o.Filter.Until, err = parseWhen("--until", s.Until, now); err != nil {
		return o, err
	}
	if s.FromOffset != "" {
		if o.Start, err = parseOffsets(s.FromOffset); err != nil {
			return o, err
		}
	}
	return o, nil
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s=%q is invalid: want an RFC 3339 time (2026-12-02T12:00:00Z) or a duration ago (90m, 2h)", flag, v)
}

// parseOffsets reads "N" or "P:N,P:N".
func parseOffsets(v string) (dlq.Position, error) {
	bad := fmt.Errorf("--from-offset=%q is invalid: want N (every partition) or P:N[,P:N...] with non-negative integers", v)
	if !strings.Contains(v, ":") {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return dlq.Position{}, bad
		}
		return dlq.FromOffset(n), nil
	}
	m := map[int32]int64{}
	for _, part := range strings.Split(v, ",") {
		ps, ns, ok := strings.Cut(strings.TrimSpace(part), ":")
		p, perr := strconv.ParseInt(ps, 10, 32)
		n, nerr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil || nerr != nil || p < 0 || n < 0 {
			return dlq.Position{}, bad
		}
		m[int32(p)] = n
	}
	return dlq.FromOffsets(m), nil
}

type dlqTailCmd struct {
	dlqSelect `embed:""`
	JSON      bool `name:"json" help:"Print JSON lines (record, coordinates, workflow state) instead of a table."`
	Follow    bool `short:"f" help:"Keep printing new dead letters until interrupted."`
	NoState   bool `name:"no-state" help:"Do not look up workflow states in Temporal."`
}

func (c *dlqTailCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	ro, err := c.readerOptions(cfg, c.Follow, time.Now())
	if err != nil {
		return err
	}
	var tc dlq.Temporal
	if !c.NoState {
		cl, err := app.DialTemporal(ctx, logger, app.TemporalOptions{})
		if err != nil {
			return fmt.Errorf("%w (use --no-state to list without workflow states)", err)
		}
		defer cl.Close()
		tc = cl.Client
	}
	r, err := dlq.NewReader(ctx, ro)
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := runTail(ctx, r, tc, newTailPrinter(dlqOut, c.JSON, c.Follow), logger)
	if err == nil && !c.JSON && n == 0 {
		fmt.Fprintf(dlqOut, "no dead letters on %s matching the filters\n", cfg.DLQTopic)
	}
	return err
}

// runTail prints every record r yields with its workflow's current state
// (looked up when tc is not nil) and returns how many it printed.
func runTail(ctx context.Context, r *dlq.Reader, tc dlq.Temporal, p *tailPrinter, logger *slog.Logger) (int, error) {
	err := r.Read(ctx, func(it dlq.Item) error {
		return p.print(it, lookupForTail(ctx, tc, it, logger))
	})
	if ferr := p.flush(); err == nil {
		err = ferr
	}
	return p.n, err
}

// lookupForTail is the STATE column: "" without Temporal, "-" when the
// record names no workflow, "?" when the look-up failed.
func lookupForTail(ctx context.Context, tc dlq.Temporal, it dlq.Item, logger *slog.Logger) string {
	if tc == nil || it.Err != nil {
		return ""
	}
	id, err := dlq.WorkflowID(it.Record)
	if err != nil {
		return "-"
	}
	st, err := dlq.LookupState(ctx, tc, id)
	if err != nil {
		logger.Warn("workflow state lookup failed", "workflowId", id, "err", err)
		return "?"
	}
	return st.String()
}

type tailPrinter struct {
	out    io.Writer
	tw     *tabwriter.Writer
	json   *json.Encoder
	follow bool
	n      int
}

func newTailPrinter(out io.Writer, asJSON, follow bool) *tailPrinter {
	p := &tailPrinter{out: out, follow: follow}
	if asJSON {
		p.json = json.NewEncoder(out)
	} else {
		p.tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	}
	return p
}

const errorWidth = 80

func (p *tailPrinter) print(it dlq.Item, state string) error {
	p.n++
	if p.json != nil {
		line := struct {
			Topic     string      `json:"topic"`
			Partition int32       `json:"partition"`
			Offset    int64       `json:"offset"`
			Timestamp time.Time   `json:"timestamp"`
			Key       string      `json:"key,omitempty"`
			Record    *dlq.Record `json:"record,omitempty"`
			State     string      `json:"workflowState,omitempty"`
			Error     string      `json:"readError,omitempty"`
		}{Topic: it.Topic, Partition: it.Partition, Offset: it.Offset, Timestamp: it.Timestamp, Key: string(it.Key), State: state}
		if it.Err != nil {
			line.Error = it.Err.Error()
		} else {
			line.Record = &it.Record
		}
		return p.json.Encode(line)
	}
	if p.n == 1 {
		fmt.Fprintln(p.tw, "TIME\tPROJECTION\tEVENT TYPE\tENTITY\tKIND\tATTEMPTS\tSTATE\tOFFSET\tERROR")
	}
	at := fmt.Sprintf("%d:%d", it.Partition, it.Offset)
	if it.Err != nil {
		fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t\t\t%s\t%s\n", it.Timestamp.UTC().Format(time.DateTime),
			dash(it.Headers[dlq.HeaderProjection]), dash(it.Headers[dlq.HeaderEventType]), dash(string(it.Key)),
			dash(it.Headers[dlq.HeaderErrorKind]), at, "UNREADABLE: "+truncate(it.Err.Error(), errorWidth))
	} else {
		r := it.Record
		fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.DeadLetteredAt.UTC().Format(time.DateTime),
			dash(r.ProjectionName), dash(r.EventType), dash(r.EntityID), dash(r.ErrorKind), r.RetryCount,
			dash(state), at, truncate(r.Error, errorWidth))
	}
	if p.follow {
		return p.tw.Flush()
	}
	return nil
}

func (p *tailPrinter) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to n runes on one line.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

type dlqReplayCmd struct {
	dlqSelect `embed:""`
	DryRun    bool   `name:"dry-run" help:"Look up every workflow and say what would happen; signal and start nothing."`
	Rate      string `help:"At most this many signals/starts per second, e.g. 20/s (default unlimited)."`
	Limit     int    `help:"Stop after this many dead letters were signalled or restarted (0: no limit)."`
	Reason    string `help:"Reason sent with the replay signal (shown by the status query, logged by each workflow)."`
	Identity  string `help:"Who replays, sent with the reason and logged by each workflow (default causet-dlq-replay:$USER@$HOST)."`
	Force     bool   `help:"Apply each event even when its entity has since applied a later one (such a replay is refused otherwise)."`
}

// replayIdentity is --identity, or the user and host as the temporal CLI
// names its own.
func (c *dlqReplayCmd) replayIdentity() string {
	if c.Identity != "" {
		return c.Identity
	}
	return "causet-dlq-replay:" + userAtHost()
}

// parseRate reads "N/s" or "N".
func parseRate(v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "/s"), 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("--rate=%q is invalid: want a positive number per second such as 20/s", v)
	}
	return f, nil
}

func (c *dlqReplayCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	ro, err := c.readerOptions(cfg, false, time.Now())
	if err != nil {
		return err
	}
	perSec, err := parseRate(c.Rate)
	if err != nil {
		return err
	}
	if c.Limit < 0 {
		return fmt.Errorf("--limit=%d is invalid: want 0 (no limit) or more", c.Limit)
	}
	// Traced, each replay joins its dead letter's trace (the record's traceparent).
	tc, err := app.DialTemporal(ctx, logger, app.TemporalOptions{Tracing: tracing.Default()})
	if err != nil {
		return err
	}
	defer tc.Close()
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{
		Client: tc.Client, TaskQueue: cfg.TaskQueue, Retry: cfg.Retry, ReplayWindow: cfg.DLQReplayWindow, DedupeHorizon: cfg.DedupeHorizon,
		Reason: c.Reason, Identity: c.replayIdentity(), Force: c.Force, DryRun: c.DryRun, Rate: perSec, Limit: c.Limit,
		Propagator: tracing.Default().TextMapPropagator(),
	})
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(ctx, ro)
	if err != nil {
		return err
	}
	defer r.Close()
	return runReplay(ctx, r, rp, c.DryRun, dlqOut, os.Stderr)
}

// runReplay feeds the reader's records to the replayer with progress on
// progressOut and the summary on out; it fails if any record failed.
func runReplay(ctx context.Context, r *dlq.Reader, rp *dlq.Replayer, dry bool, out, progressOut io.Writer) error {
	prog := newProgress(progressOut, r.Pending())
	var failures []dlq.Result
	err := r.Read(ctx, func(it dlq.Item) error {
		res, err := rp.Replay(ctx, it)
		switch res.Outcome {
		case dlq.Failed, dlq.Skipped, dlq.Refused:
			failures = append(failures, res)
		}
		if dry && res.Outcome != "" && res.Outcome != dlq.Duplicate {
			prog.clear()
			fmt.Fprintf(out, "would be %s: %s (state %s)\n", res.Outcome, dash(res.WorkflowID), res.Before)
		}
		prog.update(r.Consumed(), rp.Summary())
		return err
	})
	limited := errors.Is(err, dlq.ErrLimit)
	if limited {
		err = nil
	}
	prog.done(r.Consumed(), rp.Summary())
	for _, f := range failures {
		fmt.Fprintf(out, "%s: %d:%d %s: %v\n", f.Outcome, f.Item.Partition, f.Item.Offset, dash(f.WorkflowID), f.Err)
	}
	s := rp.Summary()
	verb := ""
	if dry {
		verb = " (dry run: nothing was signalled or started)"
	}
	fmt.Fprintf(out, "replay summary%s: signalled %d, restarted %d, already succeeded or in progress %d, failed %d, skipped %d (invalid_event), refused %d (discarded, or gone past the dedupe horizon: --force), duplicate records %d\n",
		verb, s.Signalled, s.Restarted, s.AlreadySucceeded, s.Failed, s.Skipped, s.Refused, s.Duplicates)
	if s.Unsettled > 0 {
		fmt.Fprintf(out, "%d of the signalled runs still had a workflow task pending after %s (a worker down?): signalled anyway; "+
			"a run takes a replay that arrives with its window's end, and replays queued together make one\n", s.Unsettled, rp.SettleWait())
	}
	if limited {
		fmt.Fprintln(out, "stopped at --limit; run again to continue")
	}
	if err != nil {
		return err
	}
	if s.Failed > 0 {
		return fmt.Errorf("%d dead letter(s) failed to replay", s.Failed)
	}
	return nil
}

// progress is a bar on a terminal and a plain line every few seconds otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	out   io.Writer
	total int64
	last  time.Time
}

func newProgress(out io.Writer, total int64) *progress {
	p := &progress{out: out, total: total, last: time.Now()}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func summaryLine(s dlq.Summary) string {
	return fmt.Sprintf("signalled %d, restarted %d, already %d, failed %d", s.Signalled, s.Restarted, s.AlreadySucceeded, s.Failed)
}

func (p *progress) update(read int64, s dlq.Summary) {
	if p.bar != nil {
		p.bar.Describe(summaryLine(s))
		_ = p.bar.Set64(read)
		return
	}
	if time.Since(p.last) >= 2*time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.out, "replay: read %d/%d records; %s\n", read, p.total, summaryLine(s))
	}
}

func (p *progress) clear() {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

func (p *progress) done(read int64, s dlq.Summary) {
	if p.bar != nil {
		_ = p.bar.Set64(p.total)
		_ = p.bar.Finish()
		return
	}
	fmt.Fprintf(p.out, "replay: read %d/%d records; %s\n", read, p.total, summaryLine(s))
}
