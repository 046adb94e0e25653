package workflows

import (
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Names of the ordering lane's contract.
const (
	// UpdateEnqueue adds an event to a lane; its validator refuses once the lane closes.
	UpdateEnqueue = "enqueue"
	// SignalChildSettled tells a lane that its current child reached dead_lettered.
	SignalChildSettled = "child_settled"
	// QueryLaneStatus answers the lane's status.
	QueryLaneStatus = "status"
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

// LaneFullErrorType is the ApplicationError type of the enqueue validator's
// refusal when the lane holds its bound (LaneInput.MaxQueued or
// MaxQueuedBytes): the bridge keeps the event and tries again later.
const LaneFullErrorType = "LaneFull"

// ErrLaneClosing is the enqueue validator's refusal: the lane has run every
// event it accepted (or is finishing the last ones) and takes no more. The
// bridge then waits for the lane to complete, clears the key's block and
// applies the event inline.
var ErrLaneClosing = errors.New("lane is closing")

// LaneInput starts (or continues) the lane of one (projection, fork, entity).
type LaneInput struct {
	Projection string `json:"projection"`
	ForkID     string `json:"forkId"`
	EntityID   string `json:"entityId"`
	// Queue carries accepted events across continue-as-new.
	Queue []RetryInput `json:"queue,omitempty"`
	// Done carries the count of finished events across continue-as-new.
	Done int `json:"done,omitempty"`
	// MaxQueued and MaxQueuedBytes bound the queue (0: no bound): past
	// them enqueue is refused with LaneFullErrorType, so the queue, which is
	// the continue-as-new input, stays under Temporal's blob limit and the
	// history a waiting lane gathers stays small. A first event is always
	// taken, whatever its size (the bridge bounds events).
	MaxQueued      int `json:"maxQueued,omitempty"`
	MaxQueuedBytes int `json:"maxQueuedBytes,omitempty"`
}

// LaneStatus answers the lane's status query and is its result.
type LaneStatus struct {
	Key         string `json:"key"`
	QueueLength int    `json:"queueLength"`
	Current     string `json:"current,omitempty"`
	Done        int    `json:"done"`
	Closing     bool   `json:"closing"`
}

// ChildSettled is the payload of SignalChildSettled.
type ChildSettled struct {
	WorkflowID string `json:"workflowId"`
	State      State  `json:"state"`
}

// ProjectionLaneWorkflow runs the events of one blocked key in order, each as
// a child ProjectionRetryWorkflow, moving on when the child succeeds or is
// dead-lettered. Children outlive the lane. When its queue is empty the lane
// starts closing: from then on the enqueue validator refuses, so an event can
// never be accepted by a lane that will not run it before a later event is
// applied inline.
func ProjectionLaneWorkflow(ctx workflow.Context, in LaneInput) (LaneStatus, error) {
	queue := in.Queue
	queuedBytes := 0
	for _, ev := range queue {
		queuedBytes += inputSize(ev)
	}
	st := LaneStatus{Key: in.Projection + ":" + in.ForkID + ":" + in.EntityID, Done: in.Done}
	closing := false
	if err := workflow.SetQueryHandler(ctx, QueryLaneStatus, func() (LaneStatus, error) {
		s := st
		s.QueueLength, s.Closing = len(queue), closing
		return s, nil
	}); err != nil {
		return st, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnqueue,
		func(ctx workflow.Context, ev RetryInput) (int, error) {
			queue = append(queue, ev)
			queuedBytes += inputSize(ev)
			return len(queue), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, ev RetryInput) error {
			if closing {
				return ErrLaneClosing
			}
			if ev.Projection != in.Projection || ev.Event.ForkID != in.ForkID || ev.Event.EntityID != in.EntityID {
				return fmt.Errorf("event %s belongs to another lane", ev.Event.EventID)
			}
			if len(queue) > 0 && (in.MaxQueued > 0 && len(queue) >= in.MaxQueued ||
				in.MaxQueuedBytes > 0 && queuedBytes+inputSize(ev) > in.MaxQueuedBytes) {
				return temporal.NewApplicationError(fmt.Sprintf("lane is full: %d events, %d bytes queued", len(queue), queuedBytes), LaneFullErrorType)
			}
			return nil
		}},
	); err != nil {
		return st, err
	}
	settled := workflow.GetSignalChannel(ctx, SignalChildSettled)
	// waited is the head this run last saw settle: a settled head never
	// holds its key again, so later events carrying it need no second wait.
	waited := ""

	for {
		for len(queue) > 0 {
			next := queue[0]
			queue = queue[1:]
			queuedBytes -= inputSize(next)
			if next.WaitFor != "" && !(next.WaitFor == waited && waitOnce(ctx)) {
				// An earlier event of the key retries outside the lane.
				st.Current = next.WaitFor
				if err := awaitSettled(ctx, next.WaitFor); err != nil {
					return st, err
				}
				waited = next.WaitFor
			}
			st.Current = laneChildID(ctx, next)
			if err := runChild(ctx, next, st.Current, settled); err != nil {
				return st, err
			}
			st.Current = ""
			st.Done++
			if workflow.GetInfo(ctx).GetContinueAsNewSuggested() && len(queue) > 0 {
				if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
					return st, err
				}
				return st, workflow.NewContinueAsNewError(ctx, ProjectionLaneWorkflow, LaneInput{
					Projection: in.Projection, ForkID: in.ForkID, EntityID: in.EntityID, Queue: queue, Done: st.Done,
					MaxQueued: in.MaxQueued, MaxQueuedBytes: in.MaxQueuedBytes,
				})
			}
		}
		closing = true
		// Updates accepted before closing was set finish first; any event they
		// added still runs here, before the lane completes.
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return st, err
		}
		if len(queue) == 0 {
			st.Closing = true
			return st, nil
		}
	}
}

// runChild starts the event's retry workflow and waits until it succeeds,
// closes, or reports dead_lettered. A retry workflow that already exists
// (the event was handed over before, e.g. by a bridge that crashed before
// committing its offset) is not started again — its own workflow ID makes
// it exactly one run — and is waited for until it settles.
func runChild(ctx workflow.Context, in RetryInput, id string, settled workflow.ReceiveChannel) error {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			AttrProjection.ValueSet(in.Projection),
			AttrEventType.ValueSet(in.Event.EventType),
			AttrEntityID.ValueSet(in.Event.EntityID),
			AttrForkID.ValueSet(in.Event.ForkID),
			AttrRetryState.ValueSet(string(StateRetrying)),
		),
	})
	child := workflow.ExecuteChildWorkflow(cctx, RetryWorkflowName, in)
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
		var s ChildSettled
		c.Receive(ctx, &s)
		done = s.WorkflowID == id
	})
	for !done {
		sel.Select(ctx)
	}
	return nil
}

// inputSize is an event's share of the lane's continue-as-new input: its
// JSON size, which is deterministic for a given input (encoding/json's type
// cache, which workflowcheck flags, does not change what it writes).
func inputSize(ev RetryInput) int {
	b, err := json.Marshal(ev) //workflowcheck:ignore
	if err != nil {
		return 0
	}
	return len(b)
}

// laneChildID is the ID of the retry workflow the lane runs for in.
func laneChildID(ctx workflow.Context, in RetryInput) string {
	if workflow.GetVersion(ctx, escapedIDsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return "projection-retry:" + in.Projection + ":" + in.Event.ForkID + ":" + in.Event.EventID
	}
	return RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)
}

// waitOnce reports whether this run skips a second wait for a settled head;
// runs recorded before the change waited for it before every event.
func waitOnce(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, laneWaitOnceChange, workflow.DefaultVersion, 1) == 1
}
