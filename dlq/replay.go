package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/time/rate"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// Temporal is the part of client.Client the DLQ tooling uses; client.Client
// satisfies it.
type Temporal interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// WorkflowState is what Temporal says about a record's retry workflow (its
// latest run).
type WorkflowState struct {
	// Found is false when Temporal has no run of the ID (never started, or
	// its history was removed after the namespace's retention).
	Found bool
	RunID string
	// Open is true while the run is running.
	Open bool
	// Status is the run's execution status (running, completed, ...).
	Status enumspb.WorkflowExecutionStatus
	// State is the run's CausetRetryState search attribute; empty if unset.
	State contract.State
	// PendingTask is true while the run has a workflow task not yet
	// processed: a signal (or its timer) arrived and its state is about to
	// change.
	PendingTask bool
}

// String is a short form for tables: "dead_lettered", "succeeded (closed)",
// "dead_lettered (window expired)", "retrying (terminated)", "not found".
func (s WorkflowState) String() string {
	if !s.Found {
		return "not found"
	}
	st := string(s.State)
	if st == "" {
		st = "unknown"
	}
	if s.Open {
		return st
	}
	switch {
	case s.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return st + " (" + statusName(s.Status) + ")"
	case s.State == contract.StateDeadLettered:
		return st + " (window expired)"
	}
	return st + " (closed)"
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "continued as new"
	}
	return "closed"
}

// LookupState describes the latest run of workflowID. Describe reads the
// run's mutable state, so the search attribute is current (no visibility
// lag) and closed runs are covered until retention removes them.
func LookupState(ctx context.Context, c Temporal, workflowID string) (WorkflowState, error) {
	resp, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return WorkflowState{}, nil
	}
	if err != nil {
		return WorkflowState{}, fmt.Errorf("describe workflow %s: %w", workflowID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	s := WorkflowState{
		Found:  true,
		RunID:  info.GetExecution().GetRunId(),
		Status: info.GetStatus(),
		Open:   info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
	}
	s.PendingTask = s.Open && resp.GetPendingWorkflowTask() != nil
	if p, ok := info.GetSearchAttributes().GetIndexedFields()[contract.AttrRetryState.GetName()]; ok {
		var v string
		if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err == nil {
			s.State = contract.State(v)
		}
	}
	return s, nil
}

// WorkflowID is the retry workflow ID of a DLQ record: the one it names, else
// the contract's ID from projection, fork and event ID.
func WorkflowID(r Record) (string, error) {
	if r.Workflow != nil && r.Workflow.ID != "" {
		return r.Workflow.ID, nil
	}
	env, err := r.Envelope()
	if err != nil {
		return "", err
	}
	return contract.RetryWorkflowID(r.ProjectionName, env.ForkID, env.EventID), nil
}

// DefaultSettleWait is how long a replay waits, by default, for a
// dead-lettered run to process its pending workflow task.
const DefaultSettleWait = 10 * time.Second

// settlePoll is how often that wait describes the run again.
const settlePoll = 100 * time.Millisecond

// ErrNotReplayable is returned for records without a valid envelope
// (errorKind invalid_event): there is nothing a projection could apply.
var ErrNotReplayable = errors.New("record has no valid event envelope (invalid_event): nothing to replay")

// Envelope decodes the record's original event.
func (r Record) Envelope() (event.Envelope, error) {
	if t := r.Truncated; t != nil && t.Field == "event" {
		return event.Envelope{}, fmt.Errorf("%w: the %d-byte event did not fit the record; the original is at %s partition %d offset %d",
			ErrNotReplayable, t.Size, r.Source.Topic, r.Source.Partition, r.Source.Offset)
	}
	if r.Event == nil {
		return event.Envelope{}, ErrNotReplayable
	}
	var env event.Envelope
	if err := json.Unmarshal(*r.Event, &env); err != nil {
		return event.Envelope{}, fmt.Errorf("%w: %v", ErrNotReplayable, err)
	}
	if err := env.Validate(); err != nil {
		return event.Envelope{}, fmt.Errorf("%w: %v", ErrNotReplayable, err)
	}
	return env, nil
}

// Outcome is what the Replayer did (or, dry, would do) with one record.
type Outcome string

const (
	// Signalled: the run was open in dead_lettered and got the replay signal.
	Signalled Outcome = "signalled"
	// Restarted: the run had closed (window expired, discarded, gone) and a
	// fresh run of the same workflow ID was started.
	Restarted Outcome = "restarted"
	// AlreadyDone: the event already succeeded, or a run is retrying or
	// replaying it now.
	AlreadyDone Outcome = "already_succeeded"
	// Duplicate: an earlier record of this read had the same workflow ID.
	Duplicate Outcome = "duplicate"
	// Skipped: the record holds no valid event (invalid_event).
	Skipped Outcome = "skipped"
	// Refused: replaying could apply the event twice or undo a decision —
	// its run is gone and it was dead-lettered longer ago than the dedupe
	// horizon (it may have been replayed and applied since, and the ledger
	// no longer remembers it), or its run was discarded. Force replays it.
	Refused Outcome = "refused"
	// Failed: the record could not be read or Temporal refused the action.
	Failed Outcome = "failed"
)

// Result is the outcome for one record.
type Result struct {
	Item       Item
	WorkflowID string
	// Before is the workflow's state before the action.
	Before WorkflowState
	// Unsettled is set when the run was signalled with a workflow task
	// still pending after SettleWait: the run takes a replay that arrives
	// with its window's end, and makes one replay of replays queued
	// together.
	Unsettled bool
	Outcome   Outcome
	// Err explains Failed and Skipped.
	Err error
}

// Summary counts outcomes.
type Summary struct {
	Signalled, Restarted, AlreadySucceeded, Duplicates, Skipped, Refused, Failed int
	// Unsettled counts the Signalled whose run still had a workflow task
	// pending after SettleWait.
	Unsettled int
}

// Acted is how many records were signalled or restarted.
func (s Summary) Acted() int { return s.Signalled + s.Restarted }

func (s *Summary) add(o Outcome) {
	switch o {
	case Signalled:
		s.Signalled++
	case Restarted:
		s.Restarted++
	case AlreadyDone:
		s.AlreadySucceeded++
	case Duplicate:
		s.Duplicates++
	case Skipped:
		s.Skipped++
	case Refused:
		s.Refused++
	case Failed:
		s.Failed++
	}
}

// ReplayerOptions configure a Replayer.
type ReplayerOptions struct {
	// Client talks to Temporal. Required.
	Client Temporal
	// TaskQueue is CAUSET_TASK_QUEUE, for restarted runs. Required.
	TaskQueue string
	// Retry is the schedule of restarted runs. Optional, defaults to config.DefaultRetry().
	Retry config.Retry
	// ReplayWindow is how long a restarted run that fails again stays open
	// for replay. Optional, defaults to contract.DefaultReplayWindow.
	ReplayWindow time.Duration
	// Reason goes with the replay signal (and a restarted run's input).
	// Optional.
	Reason string
	// Identity names who replays, beside Reason: the workflow logs and
	// counts both (it cannot see a signal's sender). Optional.
	Identity string
	// Force applies each replayed event even when its entity has since
	// applied a later one, and restarts a run that was discarded or that
	// Temporal no longer knows past the dedupe horizon (each is refused
	// otherwise).
	Force bool
	// DedupeHorizon is CAUSET_DEDUPE_HORIZON: a dead letter whose run is gone
	// and that is older than this is not restarted without Force. Optional,
	// defaults to the default horizon.
	DedupeHorizon time.Duration
	// DryRun looks up every workflow but signals and starts nothing.
	DryRun bool
	// Rate bounds signals and starts per second. Optional, 0 means unbounded.
	Rate float64
	// Limit stops after this many records were signalled or restarted.
	// Optional, 0 means no limit.
	Limit int
	// SettleWait bounds how long a replay waits for a dead-lettered run with
	// a pending workflow task (its replay window's timer fired, or a signal
	// arrived) to process it before deciding: a run that closed meanwhile
	// is restarted, one replaying is left alone, and one still pending after
	// SettleWait is signalled anyway. Optional, defaults to
	// DefaultSettleWait.
	SettleWait time.Duration
	// Logger gets one line per action. Optional, defaults to discarding.
	Logger *slog.Logger
	// Propagator reads the trace context a dead letter carries (its
	// traceparent and tracestate headers) into the context of its replay
	// signal or restart, so that, with a traced Client, the replay joins the
	// event's trace. Optional, defaults to OpenTelemetry's global propagator.
	Propagator propagation.TextMapPropagator
}

func (o *ReplayerOptions) validate() error {
	switch {
	case o.Client == nil:
		return errors.New("dlq replayer: Client is required")
	case o.TaskQueue == "":
		return errors.New("dlq replayer: TaskQueue is required")
	case o.Rate < 0:
		return fmt.Errorf("dlq replayer: rate %g is negative", o.Rate)
	case o.Limit < 0:
		return fmt.Errorf("dlq replayer: limit %d is negative", o.Limit)
	case o.SettleWait < 0:
		return fmt.Errorf("dlq replayer: settle wait %s is negative", o.SettleWait)
	}
	if o.SettleWait == 0 {
		o.SettleWait = DefaultSettleWait
	}
	if o.DedupeHorizon == 0 {
		o.DedupeHorizon = config.DefaultDedupeHorizon
	}
	if o.Retry == (config.Retry{}) {
		o.Retry = config.DefaultRetry()
	}
	if err := o.Retry.Validate(); err != nil {
		return err
	}
	if o.ReplayWindow <= 0 {
		o.ReplayWindow = contract.DefaultReplayWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
	}
	return nil
}

// Replayer replays dead letters: it signals open dead-lettered runs, starts a
// fresh run for closed ones and leaves succeeded or in-progress ones alone,
// so running it twice applies nothing twice and never starts two runs of one
// event. Not safe for concurrent use.
type Replayer struct {
	o       ReplayerOptions
	limiter *rate.Limiter
	seen    map[string]bool
	sum     Summary
}

// NewReplayer validates o.
func NewReplayer(o ReplayerOptions) (*Replayer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	r := &Replayer{o: o, seen: map[string]bool{}}
	if o.Rate > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	return r, nil
}

// ErrLimit is returned by Replay once Limit records were acted on.
var ErrLimit = errors.New("replay limit reached")

// SettleWait is the replayer's wait for a pending workflow task.
func (r *Replayer) SettleWait() time.Duration { return r.o.SettleWait }

// Summary returns the counts so far.
func (r *Replayer) Summary() Summary { return r.sum }

// Replay handles one DLQ item. It returns ErrLimit (with the result of this
// item) when the limit has been reached after it, and ctx's error if ctx
// ends; Temporal errors are reported in Result, not returned.
func (r *Replayer) Replay(ctx context.Context, it Item) (Result, error) {
	if r.o.Limit > 0 && r.sum.Acted() >= r.o.Limit {
		return Result{Item: it}, ErrLimit
	}
	res := r.replay(ctx, it)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	r.sum.add(res.Outcome)
	if res.Unsettled && res.Outcome == Signalled {
		r.sum.Unsettled++
	}
	if res.Outcome == Failed || res.Outcome == Skipped || res.Outcome == Refused {
		r.o.Logger.Warn("dlq replay", "outcome", res.Outcome, "workflowId", res.WorkflowID,
			"partition", it.Partition, "offset", it.Offset, "error", res.Err)
	} else if res.Outcome != Duplicate {
		r.o.Logger.Info("dlq replay", "outcome", res.Outcome, "workflowId", res.WorkflowID,
			"state", res.Before.String(), "unsettled", res.Unsettled, "dryRun", r.o.DryRun, "identity", r.o.Identity, "reason", r.o.Reason)
	}
	if r.o.Limit > 0 && r.sum.Acted() >= r.o.Limit {
		return res, ErrLimit
	}
	return res, nil
}

func (r *Replayer) replay(ctx context.Context, it Item) Result {
	res := Result{Item: it}
	if it.Err != nil {
		res.Outcome, res.Err = Failed, fmt.Errorf("record %s[%d]@%d: %w", it.Topic, it.Partition, it.Offset, it.Err)
		return res
	}
	id, err := WorkflowID(it.Record)
	if err != nil {
		res.Outcome, res.Err = Skipped, err
		return res
	}
	res.WorkflowID = id
	ctx = r.o.Propagator.Extract(ctx, propagation.MapCarrier(it.Headers))
	// A replayed event that failed again has a newer record with the same ID.
	if r.seen[id] {
		res.Outcome = Duplicate
		return res
	}
	r.seen[id] = true

	// Two tries: a run that closes between the look-up and the signal is
	// restarted instead.
	for try := 0; ; try++ {
		st, err := LookupState(ctx, r.o.Client, id)
		if err != nil {
			res.Outcome, res.Err = Failed, err
			return res
		}
		if st.Open && st.State == contract.StateDeadLettered && st.PendingTask {
			if r.replayQueued(ctx, id, st.RunID) {
				// An earlier replay's signal waits for the run: it will be
				// honoured, even with the window's end; another would only
				// queue a second replay.
				res.Before, res.Outcome = st, AlreadyDone
				return res
			}
			// The pending task may be the replay window's timer, after which
			// the run closes: wait for it to be processed, then decide.
			if st, res.Unsettled, err = r.settle(ctx, id, st); err != nil {
				res.Outcome, res.Err = Failed, err
				return res
			}
		}
		res.Before = st
		var act Outcome
		if refused := r.refuses(it.Record, st); refused != nil && !r.o.Force {
			res.Outcome, res.Err = Refused, refused
			return res
		}
		switch {
		case st.Open && st.State == contract.StateDeadLettered:
			act = Signalled
		case st.Open, st.State == contract.StateSucceeded:
			// Retrying or replaying now, or already applied.
			res.Outcome = AlreadyDone
			return res
		default:
			// Closed after its window expired, discarded, failed,
			// terminated, or no longer known to Temporal.
			act = Restarted
		}
		if r.o.DryRun {
			res.Outcome = act
			return res
		}
		if r.limiter != nil {
			if err := r.limiter.Wait(ctx); err != nil {
				res.Outcome, res.Err = Failed, err
				return res
			}
		}
		if act == Signalled {
			err = r.o.Client.SignalWorkflow(ctx, id, st.RunID, contract.SignalReplay, r.signal())
		} else {
			err = r.restart(ctx, it)
		}
		var nf *serviceerror.NotFound
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		switch {
		case err == nil:
			res.Outcome = act
			return res
		case try == 0 && (errors.As(err, &nf) || errors.As(err, &started)):
			continue // the run closed, or another run started: look again
		case errors.As(err, &started):
			res.Outcome = AlreadyDone
			return res
		default:
			res.Outcome, res.Err = Failed, fmt.Errorf("%s workflow %s: %w", act, id, err)
			return res
		}
	}
}

// historian reads a run's history; client.Client is one.
type historian interface {
	GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
		filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
}

// replayQueued reports whether the run's history has a replay signal after
// its last completed workflow task: one the run has not processed yet. A
// dead-lettered run's history is short (its schedule's activity, the dead
// letter, a timer). False when the client cannot read history or the read
// fails: the caller then waits for the run to settle.
func (r *Replayer) replayQueued(ctx context.Context, id, runID string) bool {
	h, ok := r.o.Client.(historian)
	if !ok {
		return false
	}
	it := h.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	queued := false
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return false
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			queued = false
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			if e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == contract.SignalReplay {
				queued = true
			}
		}
	}
	return queued
}

// settle describes the dead-lettered run id again until its pending
// workflow task is processed or SettleWait passes; unsettled is true in the
// second case, with st as last described.
func (r *Replayer) settle(ctx context.Context, id string, st WorkflowState) (_ WorkflowState, unsettled bool, _ error) {
	deadline := time.Now().Add(r.o.SettleWait)
	for st.Open && st.PendingTask {
		if !time.Now().Before(deadline) {
			return st, true, nil
		}
		t := time.NewTimer(min(settlePoll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, false, ctx.Err()
		case <-t.C:
		}
		next, err := LookupState(ctx, r.o.Client, id)
		if err != nil {
			return st, false, err
		}
		st = next
	}
	return st, false, nil
}

// refuses says why restarting the record's run, as it stands, could apply
// its event twice or undo an operator's decision; nil when it cannot.
func (r *Replayer) refuses(rec Record, st WorkflowState) error {
	switch {
	case !st.Found && !rec.DeadLetteredAt.IsZero() && time.Since(rec.DeadLetteredAt) > r.o.DedupeHorizon:
		return fmt.Errorf("its run is gone and it was dead-lettered %s ago, more than the dedupe horizon (%s): if it was replayed since, "+
			"the ledger no longer remembers it and it would apply twice; replay with --force if it never applied",
			time.Since(rec.DeadLetteredAt).Round(time.Hour), r.o.DedupeHorizon)
	case st.Found && !st.Open && st.State == contract.StateDiscarded:
		return errors.New("it was discarded: replay with --force to undo that decision")
	}
	return nil
}

// restart starts a fresh run of the record's workflow ID in workflow mode
// (every attempt in the workflow, full schedule). ALLOW_DUPLICATE permits a
// new run after a closed one; the FAIL conflict policy refuses a second run
// while one is open.
func (r *Replayer) restart(ctx context.Context, it Item) error {
	env, err := it.Record.Envelope()
	if err != nil {
		return err
	}
	sig := r.signal()
	in := contract.RetryInput{
		Event:        env,
		Projection:   it.Record.ProjectionName,
		Key:          it.Key,
		Source:       it.Record.Source,
		Mode:         config.ModeWorkflow,
		Retry:        r.o.Retry,
		ReplayWindow: r.o.ReplayWindow,
		Replay:       &sig,
	}
	id, err := WorkflowID(it.Record)
	if err != nil {
		return err
	}
	_, err = r.o.Client.ExecuteWorkflow(ctx, RestartOptions(id, r.o.TaskQueue, in), contract.RetryWorkflowName, in)
	return err
}

// signal is the replay signal's payload.
func (r *Replayer) signal() contract.ReplaySignal {
	return contract.ReplaySignal{Identity: r.o.Identity, Reason: r.o.Reason, Force: r.o.Force}
}

// RestartOptions are the start options of a replayed run: the same workflow
// ID, a new run allowed only once the earlier one closed, an error (never a
// second run, never the open run silently) when one is open, and the five
// search attributes in state retrying.
func RestartOptions(id, taskQueue string, in contract.RetryInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                taskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    in.SearchAttributes(),
		StaticSummary:                            in.Summary(),
		StaticDetails:                            in.Details(),
	}
}
