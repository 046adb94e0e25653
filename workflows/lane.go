package workflows

import (
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
)

// escapedIDsChange versions the child IDs, whose fields are escaped since
// this change: a lane that started a child under the plain ID replays with it.
const escapedIDsChange = "escaped-ids"

// laneWaitOnceChange versions the lane's skipping of a wait for a head it
// has already seen settle.
const laneWaitOnceChange = "lane-wait-once"

// laneAwaitHandedOverChange versions runChild's wait for a retry workflow
// that existed before the lane got its event.
const laneAwaitHandedOverChange = "lane-await-handed-over"

// LaneStatus answers the lane's status query and is its result.
type LaneStatus struct {
	Key         string `json:"key"`
	QueueLength int    `json:"queueLength"`
	Current     string `json:"current,omitempty"`
	Done        int    `json:"done"`
	Closing     bool   `json:"closing"`
}

// ProjectionLaneWorkflow runs the events of one blocked key in order, each as
// a child ProjectionRetryWorkflow, moving on when the child succeeds or is
// dead-lettered. Children outlive the lane. When its queue is empty the lane
// starts closing: from then on the enqueue validator refuses, so an event can
// never be accepted by a lane that will not run it before a later event is
// applied inline.
func ProjectionLaneWorkflow(ctx workflow.Context, in contract.LaneInput) (LaneStatus, error) {
	l := &laneRun{in: in, queue: in.Queue, status: LaneStatus{Key: in.Projection + ":" + in.ForkID + ":" + in.EntityID, Done: in.Done}}
	for _, ev := range l.queue {
		l.queuedBytes += inputSize(ev)
	}
	if err := workflow.SetQueryHandler(ctx, contract.QueryLaneStatus, l.query); err != nil {
		return l.status, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, contract.UpdateEnqueue, l.enqueue,
		workflow.UpdateHandlerOptions{Validator: l.validate}); err != nil {
		return l.status, err
	}
	return l.run(ctx)
}

// laneRun is one run of a lane: its queue, carried across continue-as-new,
// and what its status query answers.
type laneRun struct {
	in          contract.LaneInput
	queue       []contract.RetryInput
	queuedBytes int
	closing     bool
	status      LaneStatus
	// waited is the head this run last saw settle: a settled head never
	// holds its key again, so later events carrying it need no second wait.
	waited string
}

func (l *laneRun) query() (LaneStatus, error) {
	s := l.status
	s.QueueLength, s.Closing = len(l.queue), l.closing
	return s, nil
}

func (l *laneRun) enqueue(_ workflow.Context, ev contract.RetryInput) (int, error) {
	l.queue = append(l.queue, ev)
	l.queuedBytes += inputSize(ev)
	return len(l.queue), nil
}

// validate refuses an event once the lane is closing, one of another key,
// and one past the lane's bounds (a first event is always taken).
func (l *laneRun) validate(_ workflow.Context, ev contract.RetryInput) error {
	in := l.in
	if l.closing {
		return temporal.NewApplicationError("lane is closing", contract.LaneClosingErrorType)
	}
	if ev.Projection != in.Projection || ev.Event.ForkID != in.ForkID || ev.Event.EntityID != in.EntityID {
		return fmt.Errorf("event %s belongs to another lane", ev.Event.EventID)
	}
	if len(l.queue) > 0 && (in.MaxQueued > 0 && len(l.queue) >= in.MaxQueued ||
		in.MaxQueuedBytes > 0 && l.queuedBytes+inputSize(ev) > in.MaxQueuedBytes) {
		return temporal.NewApplicationError(fmt.Sprintf("lane is full: %d events, %d bytes queued", len(l.queue), l.queuedBytes), contract.LaneFullErrorType)
	}
	return nil
}

// run runs the queue until it is empty and every accepted update has
// finished, continuing as new when the history grows long.
func (l *laneRun) run(ctx workflow.Context) (LaneStatus, error) {
	settled := workflow.GetSignalChannel(ctx, contract.SignalChildSettled)
	for {
		for len(l.queue) > 0 {
			next := l.queue[0]
			l.queue = l.queue[1:]
			l.queuedBytes -= inputSize(next)
			if err := l.runOne(ctx, next, settled); err != nil {
				return l.status, err
			}
			if workflow.GetInfo(ctx).GetContinueAsNewSuggested() && len(l.queue) > 0 {
				if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
					return l.status, err
				}
				in := l.in
				return l.status, workflow.NewContinueAsNewError(ctx, ProjectionLaneWorkflow, contract.LaneInput{
					Projection: in.Projection, ForkID: in.ForkID, EntityID: in.EntityID, Queue: l.queue, Done: l.status.Done,
					MaxQueued: in.MaxQueued, MaxQueuedBytes: in.MaxQueuedBytes, HoldEntity: in.HoldEntity,
				})
			}
		}
		l.closing = true
		// Updates accepted before closing was set finish first; any event they
		// added still runs here, before the lane completes.
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return l.status, err
		}
		if len(l.queue) == 0 {
			l.status.Closing = true
			return l.status, nil
		}
	}
}

// runOne runs one event: after the head it waits for, if it has not seen
// that head settle, then as a child retry workflow.
func (l *laneRun) runOne(ctx workflow.Context, next contract.RetryInput, settled workflow.ReceiveChannel) error {
	if next.WaitFor != "" && !(next.WaitFor == l.waited && waitOnce(ctx)) {
		// An earlier event of the key retries outside the lane.
		l.status.Current = next.WaitFor
		wait := awaitSettled
		if l.in.HoldEntity {
			wait = awaitFinal
		}
		if err := wait(ctx, next.WaitFor); err != nil {
			return err
		}
		l.waited = next.WaitFor
	}
	l.status.Current = laneChildID(ctx, next)
	if err := runChild(ctx, next, l.status.Current, settled, l.in.HoldEntity); err != nil {
		return err
	}
	l.status.Current = ""
	l.status.Done++
	return nil
}

// runChild starts the event's retry workflow and waits until it succeeds,
// closes, or reports dead_lettered (with hold, a dead letter holds the key:
// only its close lets the lane go on). A retry workflow that already exists
// (the event was handed over before, e.g. by a bridge that crashed before
// committing its offset) is not started again — its own workflow ID makes
// it exactly one run — and is waited for until it settles.
func runChild(ctx workflow.Context, in contract.RetryInput, id string, settled workflow.ReceiveChannel, hold bool) error {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: in.SearchAttributes(),
	})
	child := workflow.ExecuteChildWorkflow(cctx, contract.RetryWorkflowName, in)
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		var started *temporal.ChildWorkflowExecutionAlreadyStartedError
		if errors.As(err, &started) {
			// Not the lane's child, so no completion or settled signal reaches
			// the lane: the key's next event waits until it settles.
			// Lanes that moved on at once before this wait existed replay as they ran.
			if workflow.GetVersion(ctx, laneAwaitHandedOverChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				return nil
			}
			workflow.GetLogger(ctx).Info("event already handed over; waiting for its retry workflow to settle", "workflowId", id)
			if hold {
				return awaitFinal(ctx, id)
			}
			return awaitSettled(ctx, id)
		}
		return err
	}
	done := false
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(child, func(f workflow.Future) {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("retry workflow ended with an error; lane moves on", "workflowId", id, "error", err)
		}
		done = true
	})
	sel.AddReceive(settled, func(c workflow.ReceiveChannel, _ bool) {
		var s contract.ChildSettled
		c.Receive(ctx, &s)
		done = s.WorkflowID == id && !hold
	})
	for !done {
		sel.Select(ctx)
	}
	return nil
}

// inputSize is an event's share of the lane's continue-as-new input: its
// JSON size, which is deterministic for a given input (encoding/json's type
// cache, which workflowcheck flags, does not change what it writes).
func inputSize(ev contract.RetryInput) int {
	b, err := json.Marshal(ev) //workflowcheck:ignore
	if err != nil {
		return 0
	}
	return len(b)
}

// laneChildID is the ID of the retry workflow the lane runs for in.
func laneChildID(ctx workflow.Context, in contract.RetryInput) string {
	if workflow.GetVersion(ctx, escapedIDsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return "projection-retry:" + in.Projection + ":" + in.Event.ForkID + ":" + in.Event.EventID
	}
	return contract.RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)
}

// waitOnce reports whether this run skips a second wait for a settled head;
// runs recorded before the change waited for it before every event.
func waitOnce(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, laneWaitOnceChange, workflow.DefaultVersion, 1) == 1
}
