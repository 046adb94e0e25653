package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
)

type fakeRun struct {
	open    bool
	state   contract.State
	runID   string
	pending bool
	// settleAfter, when positive, is how many more describes find the
	// pending task unprocessed; then settled runs (the worker's task).
	settleAfter int
	settled     func(*fakeRun)
	// queuedReplay: a replay signal waits in the run's history for the
	// pending task.
	queuedReplay bool
}

// GetWorkflowHistory returns the tail of a run's history that matters: a
// completed workflow task and, when one is queued, a replay signal.
func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, id, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	evs := []*historypb.HistoryEvent{{EventType: enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED}}
	if r := f.runs[id]; r != nil && r.queuedReplay {
		evs = append(evs, &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
				WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{SignalName: contract.SignalReplay}}})
	}
	return &sliceHistory{evs: evs}
}

type sliceHistory struct{ evs []*historypb.HistoryEvent }

func (h *sliceHistory) HasNext() bool { return len(h.evs) > 0 }
func (h *sliceHistory) Next() (*historypb.HistoryEvent, error) {
	e := h.evs[0]
	h.evs = h.evs[1:]
	return e, nil
}

// fakeTemporal keeps one run per workflow ID and records the actions.
type fakeTemporal struct {
	runs     map[string]*fakeRun
	signals  []string
	starts   []client.StartWorkflowOptions
	inputs   []contract.RetryInput
	failNext error // returned by the next signal or start
	// closeOnSignal closes the run just before the signal arrives (a race).
	closeOnSignal bool
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r, ok := f.runs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	if r.pending && r.settleAfter > 0 {
		if r.settleAfter--; r.settleAfter == 0 {
			r.pending, r.queuedReplay = false, false
			r.settled(r)
		}
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(string(r.state))
	if err != nil {
		return nil, err
	}
	status := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	if r.open {
		status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	resp := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: id, RunId: r.runID},
		Status:           status,
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{"CausetRetryState": p}},
	}}
	if r.pending {
		resp.PendingWorkflowTask = &workflowpb.PendingWorkflowTaskInfo{}
	}
	return resp, nil
}

func (f *fakeTemporal) SignalWorkflow(_ context.Context, id, runID, name string, arg any) error {
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	r := f.runs[id]
	if f.closeOnSignal {
		f.closeOnSignal = false
		r.open = false
	}
	if r == nil || !r.open || r.runID != runID {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	sig := arg.(contract.ReplaySignal)
	f.signals = append(f.signals, strings.TrimSpace(id+" "+name+" "+sig.Reason+" "+sig.Identity))
	// The worker processes it at the second describe after: the run replays.
	r.pending, r.settleAfter, r.queuedReplay = true, 2, true
	r.settled = func(r *fakeRun) { r.state = contract.StateReplaying }
	return nil
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	if err := f.failNext; err != nil {
		f.failNext = nil
		return nil, err
	}
	if r, ok := f.runs[o.ID]; ok && r.open {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", r.runID)
	}
	f.starts = append(f.starts, o)
	f.inputs = append(f.inputs, args[0].(contract.RetryInput))
	f.runs[o.ID] = &fakeRun{open: true, state: contract.StateRetrying, runID: "run-" + o.ID + "-new"}
	return nil, nil
}

func item(t *testing.T, eventID string, offset int64) dlq.Item {
	t.Helper()
	ev := json.RawMessage(`{"eventId":"` + eventID + `","eventType":"ARTIST_FOLLOWED","entityId":"user-1","forkId":"production","payload":{"artistId":"a"}}`)
	return dlq.Item{Topic: "dlq", Offset: offset, Key: []byte("user-1"), Record: dlq.Record{
		SchemaVersion: 1, Event: &ev, ProjectionName: "p", EventType: "ARTIST_FOLLOWED", ForkID: "production", ErrorKind: "sql",
		Source: contract.Source{Topic: "events", Partition: 2, Offset: 9},
	}}
}

func TestReplayerDecisions(t *testing.T) {
	id := func(e string) string { return contract.RetryWorkflowID("p", "production", e) }
	f := &fakeTemporal{runs: map[string]*fakeRun{
		id("dead"):      {open: true, state: contract.StateDeadLettered, runID: "r1"},
		id("expired"):   {open: false, state: contract.StateDeadLettered, runID: "r2"},
		id("discarded"): {open: false, state: contract.StateDiscarded, runID: "r3"},
		id("done"):      {open: false, state: contract.StateSucceeded, runID: "r4"},
		id("retrying"):  {open: true, state: contract.StateRetrying, runID: "r5"},
		id("replaying"): {open: true, state: contract.StateReplaying, runID: "r6"},
		id("signalled"): {open: true, state: contract.StateDeadLettered, runID: "r7", pending: true, queuedReplay: true},
		id("stuck"):     {open: true, state: contract.StateDeadLettered, runID: "r8", pending: true},
	}}
	retry := config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 2, Max: 10 * time.Second}
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", Retry: retry, Reason: "fixed", Identity: "alice", ReplayWindow: 42,
		SettleWait: 300 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()

	want := map[string]dlq.Outcome{
		"dead": dlq.Signalled, "expired": dlq.Restarted, "discarded": dlq.Refused, "gone": dlq.Restarted,
		"done": dlq.AlreadyDone, "retrying": dlq.AlreadyDone, "replaying": dlq.AlreadyDone,
		// A replay signal waits for its pending task: it is honoured.
		"signalled": dlq.AlreadyDone,
		// Its task, not a replay, stays pending past SettleWait (a worker
		// down): signalled anyway, for the run takes a replay that arrives
		// with its window's end.
		"stuck": dlq.Signalled,
	}
	for _, e := range []string{"dead", "expired", "discarded", "gone", "done", "retrying", "replaying", "signalled", "stuck"} {
		res, err := rp.Replay(ctx, item(t, e, 0))
		require.NoError(t, err)
		require.Equal(t, want[e], res.Outcome, e)
		require.Equal(t, id(e), res.WorkflowID)
		require.Equal(t, e == "stuck", res.Unsettled, e)
	}
	// The same event again (a later dead letter of it): handled once.
	res, err := rp.Replay(ctx, item(t, "dead", 5))
	require.NoError(t, err)
	require.Equal(t, dlq.Duplicate, res.Outcome)

	// A newer schema and an invalid event.
	res, err = rp.Replay(ctx, dlq.Item{Err: &dlq.UnsupportedVersionError{Version: 2}})
	require.NoError(t, err)
	require.Equal(t, dlq.Failed, res.Outcome)
	res, err = rp.Replay(ctx, dlq.Item{Record: dlq.Record{SchemaVersion: 1, ProjectionName: "p", ErrorKind: "invalid_event", RawValue: []byte("{")}})
	require.NoError(t, err)
	require.Equal(t, dlq.Skipped, res.Outcome)
	require.ErrorIs(t, res.Err, dlq.ErrNotReplayable)

	require.Equal(t, dlq.Summary{Signalled: 2, Restarted: 2, AlreadySucceeded: 4, Duplicates: 1, Skipped: 1, Refused: 1, Failed: 1, Unsettled: 1}, rp.Summary())
	require.Equal(t, []string{id("dead") + " replay fixed alice", id("stuck") + " replay fixed alice"}, f.signals, "the signal says who and why")
	require.Len(t, f.starts, 2)
	o := f.starts[0]
	require.Equal(t, id("expired"), o.ID)
	require.Equal(t, "tq", o.TaskQueue)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, o.WorkflowIDReusePolicy)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL, o.WorkflowIDConflictPolicy)
	in := f.inputs[0]
	require.Equal(t, config.ModeWorkflow, in.Mode)
	require.Nil(t, in.FirstAttempt)
	require.Equal(t, retry, in.Retry)
	require.EqualValues(t, 42, in.ReplayWindow)
	require.Equal(t, "expired", in.Event.EventID)
	require.Equal(t, "p", in.Projection)
	require.Equal(t, []byte("user-1"), in.Key)
	require.Equal(t, contract.Source{Topic: "events", Partition: 2, Offset: 9}, in.Source)
	require.Equal(t, &contract.OperatorSignal{Identity: "alice", Reason: "fixed"}, in.Replay, "so does a restarted run's input")

	// Replaying again: everything is in progress now, nothing more happens;
	// the discarded run stays discarded.
	rp2, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq"})
	require.NoError(t, err)
	for _, e := range []string{"dead", "expired", "discarded", "gone", "done", "retrying", "replaying"} {
		res, err := rp2.Replay(ctx, item(t, e, 0))
		require.NoError(t, err)
		if e == "discarded" {
			require.Equal(t, dlq.Refused, res.Outcome, e)
			require.ErrorContains(t, res.Err, "it was discarded: replay with --force")
			continue
		}
		require.Equal(t, dlq.AlreadyDone, res.Outcome, e)
	}
	require.Len(t, f.signals, 2, "a run whose replay signal is queued is not signalled twice")
	require.Len(t, f.starts, 2)

	// --force undoes the discard.
	rp3, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", Force: true})
	require.NoError(t, err)
	res, err = rp3.Replay(ctx, item(t, "discarded", 0))
	require.NoError(t, err)
	require.Equal(t, dlq.Restarted, res.Outcome)
}

// A dead letter whose replay window's timer has just fired has a workflow
// task pending, after which it closes as expired. The replayer waits for
// the task to be processed, finds the run closed and restarts it: the
// replay is not dropped as "already done".
func TestReplayerWaitsForTheWindowsEnd(t *testing.T) {
	id := contract.RetryWorkflowID("p", "production", "closing")
	f := &fakeTemporal{runs: map[string]*fakeRun{
		id: {open: true, state: contract.StateDeadLettered, runID: "r1", pending: true, settleAfter: 3,
			settled: func(r *fakeRun) { r.open = false }},
	}}
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", SettleWait: 5 * time.Second})
	require.NoError(t, err)
	res, err := rp.Replay(context.Background(), item(t, "closing", 0))
	require.NoError(t, err)
	require.Equal(t, dlq.Restarted, res.Outcome)
	require.False(t, res.Unsettled)
	require.Equal(t, "dead_lettered (window expired)", res.Before.String())
	require.Len(t, f.starts, 1)
	require.Empty(t, f.signals)

	_, err = dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", SettleWait: -time.Second})
	require.ErrorContains(t, err, "settle wait -1s is negative")
}

// A dead letter whose run Temporal no longer knows (retention) and that is
// older than the dedupe horizon may have been replayed and applied since:
// the ledger no longer remembers it, so restarting it could apply it twice.
// It is refused without --force; a younger one is restarted.
func TestReplayerRefusesGoneRunsPastTheDedupeHorizon(t *testing.T) {
	f := &fakeTemporal{runs: map[string]*fakeRun{}}
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", DedupeHorizon: 24 * time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	old := item(t, "old", 0)
	old.Record.DeadLetteredAt = time.Now().Add(-25 * time.Hour)
	res, err := rp.Replay(ctx, old)
	require.NoError(t, err)
	require.Equal(t, dlq.Refused, res.Outcome)
	require.ErrorContains(t, res.Err, "more than the dedupe horizon (24h0m0s)")
	young := item(t, "young", 1)
	young.Record.DeadLetteredAt = time.Now().Add(-23 * time.Hour)
	res, err = rp.Replay(ctx, young)
	require.NoError(t, err)
	require.Equal(t, dlq.Restarted, res.Outcome)
	require.Len(t, f.starts, 1)

	forced, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", DedupeHorizon: 24 * time.Hour, Force: true})
	require.NoError(t, err)
	res, err = forced.Replay(ctx, old)
	require.NoError(t, err)
	require.Equal(t, dlq.Restarted, res.Outcome)
}

func TestReplayerDryRunLimitAndErrors(t *testing.T) {
	ctx := context.Background()
	id := func(e string) string { return contract.RetryWorkflowID("p", "production", e) }
	runs := func() map[string]*fakeRun {
		return map[string]*fakeRun{
			id("a"): {open: true, state: contract.StateDeadLettered, runID: "ra"},
			id("b"): {open: false, state: contract.StateDeadLettered, runID: "rb"},
			id("c"): {open: true, state: contract.StateDeadLettered, runID: "rc"},
		}
	}

	t.Run("dry run", func(t *testing.T) {
		f := &fakeTemporal{runs: runs()}
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", DryRun: true})
		require.NoError(t, err)
		for _, e := range []string{"a", "b", "c"} {
			_, err := rp.Replay(ctx, item(t, e, 0))
			require.NoError(t, err)
		}
		require.Equal(t, dlq.Summary{Signalled: 2, Restarted: 1}, rp.Summary())
		require.Empty(t, f.signals)
		require.Empty(t, f.starts)
	})

	t.Run("limit", func(t *testing.T) {
		f := &fakeTemporal{runs: runs()}
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq", Limit: 2, Rate: 1000})
		require.NoError(t, err)
		_, err = rp.Replay(ctx, item(t, "a", 0))
		require.NoError(t, err)
		_, err = rp.Replay(ctx, item(t, "b", 1))
		require.ErrorIs(t, err, dlq.ErrLimit)
		_, err = rp.Replay(ctx, item(t, "c", 2))
		require.ErrorIs(t, err, dlq.ErrLimit)
		require.Equal(t, dlq.Summary{Signalled: 1, Restarted: 1}, rp.Summary())
	})

	t.Run("run closes before the signal: restarted", func(t *testing.T) {
		f := &fakeTemporal{runs: runs(), closeOnSignal: true}
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq"})
		require.NoError(t, err)
		res, err := rp.Replay(ctx, item(t, "a", 0))
		require.NoError(t, err)
		require.Equal(t, dlq.Restarted, res.Outcome)
		require.Len(t, f.starts, 1)
	})

	t.Run("temporal error: failed", func(t *testing.T) {
		f := &fakeTemporal{runs: runs(), failNext: errors.New("unavailable")}
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: f, TaskQueue: "tq"})
		require.NoError(t, err)
		res, err := rp.Replay(ctx, item(t, "b", 0))
		require.NoError(t, err)
		require.Equal(t, dlq.Failed, res.Outcome)
		require.ErrorContains(t, res.Err, "unavailable")
		require.Equal(t, 1, rp.Summary().Failed)
	})

	t.Run("options", func(t *testing.T) {
		_, err := dlq.NewReplayer(dlq.ReplayerOptions{TaskQueue: "tq"})
		require.ErrorContains(t, err, "Client is required")
		_, err = dlq.NewReplayer(dlq.ReplayerOptions{Client: &fakeTemporal{}})
		require.ErrorContains(t, err, "TaskQueue is required")
	})
}

func TestWorkflowStateString(t *testing.T) {
	require.Equal(t, "not found", dlq.WorkflowState{}.String())
	require.Equal(t, "dead_lettered", dlq.WorkflowState{Found: true, Open: true, State: contract.StateDeadLettered}.String())
	require.Equal(t, "succeeded (closed)", dlq.WorkflowState{Found: true, Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, State: contract.StateSucceeded}.String())
	require.Equal(t, "dead_lettered (window expired)", dlq.WorkflowState{Found: true, Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, State: contract.StateDeadLettered}.String())
	require.Equal(t, "retrying (terminated)", dlq.WorkflowState{Found: true, Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, State: contract.StateRetrying}.String())
}
