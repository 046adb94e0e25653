package contract

import (
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Workflow, signal, query and update names (CONTRACT §6).
const (
	RetryWorkflowName = "ProjectionRetryWorkflow"
	LaneWorkflowName  = "ProjectionLaneWorkflow"
	SignalReplay      = "replay"
	SignalDiscard     = "discard"
	QueryStatus       = "status"

	// UpdateEnqueue adds an event to a lane; its validator refuses once the lane closes.
	UpdateEnqueue = "enqueue"
	// SignalChildSettled tells a lane that its current child reached dead_lettered.
	SignalChildSettled = "child_settled"
	// QueryLaneStatus answers the lane's status.
	QueryLaneStatus = "status"
)

// Activity names as the worker registers them. Workflows refer to them by
// name, so the activities can use the workflow packages' types.
const (
	ApplyProjectionActivity   = "ApplyProjection"
	PublishDeadLetterActivity = "PublishDeadLetter"
	// AwaitRetrySettledActivity waits until a retry workflow has settled
	// (Settled); a lane runs it before an event whose WaitFor is set.
	AwaitRetrySettledActivity = "AwaitRetrySettled"
	// AwaitRetryFinalActivity waits until a retry workflow is final (Final):
	// with CAUSET_DLQ_HOLD_ENTITY a lane waits with it.
	AwaitRetryFinalActivity = "AwaitRetryFinal"
)

// WaitTaskQueue is the task queue of the activities with which lanes wait
// for retry workflows (AwaitRetrySettled, AwaitRetryFinal): a wait lasts as
// long as the retry it waits for, so on the main queue thousands of waits
// would take every activity slot and starve the very ApplyProjection
// attempts they wait for.
func WaitTaskQueue(taskQueue string) string { return taskQueue + "-waits" }

// ApplicationError types of the lane's enqueue validator.
const (
	// LaneFullErrorType: the lane holds its bound (LaneInput.MaxQueued or
	// MaxQueuedBytes); the bridge keeps the event and tries again later.
	LaneFullErrorType = "LaneFull"
	// LaneClosingErrorType: the lane has run every event it accepted (or is
	// finishing the last ones) and takes no more. The bridge then waits for
	// the lane to complete, clears the key's block and applies the event
	// inline.
	LaneClosingErrorType = "LaneClosing"
)

// State is a retry workflow's state, also its CausetRetryState search attribute.
type State string

const (
	StateRetrying     State = "retrying"
	StateDeadLettered State = "dead_lettered"
	StateReplaying    State = "replaying"
	StateSucceeded    State = "succeeded"
	StateDiscarded    State = "discarded"
)

// Search attributes (Keyword) set at start and upserted on every state change.
var (
	AttrProjection = temporal.NewSearchAttributeKeyKeyword("CausetProjection")
	AttrEventType  = temporal.NewSearchAttributeKeyKeyword("CausetEventType")
	AttrEntityID   = temporal.NewSearchAttributeKeyKeyword("CausetEntityId")
	AttrForkID     = temporal.NewSearchAttributeKeyKeyword("CausetForkId")
	AttrRetryState = temporal.NewSearchAttributeKeyKeyword("CausetRetryState")
)

// Memo fields a retry run upserts when it is dead-lettered. They need no
// registration in the namespace, and visibility lists return them, so the
// worker's dead-letter gauges read when and why each open dead letter
// failed without querying the runs.
const (
	// MemoDeadLetteredAt is when the run was last dead-lettered (a time).
	MemoDeadLetteredAt = "CausetDeadLetteredAt"
	// MemoErrorKind is the error kind of the attempt that dead-lettered it.
	MemoErrorKind = "CausetErrorKind"
)

// Outcomes of an operator signal (the projection_operator_action line and
// its counter).
const (
	// OutcomeActed: the run replays, or closes as discarded.
	OutcomeActed = "acted"
	// OutcomeCoalesced: a replay taken at the same time answers this one too.
	OutcomeCoalesced = "coalesced"
	// OutcomeRestarted: a bulk replay started a new run after the earlier
	// one had closed.
	OutcomeRestarted = "restarted"
	// OutcomeIgnored: the run had nothing left to decide (it succeeded, or
	// closed on another decision or at the window's end).
	OutcomeIgnored = "ignored"
)

// MetricOperatorActions counts operator signals by projection, action and
// outcome; retry runs count it on the worker's SDK metrics handler.
const MetricOperatorActions = "causet_projection_operator_actions_total"

// SearchAttributeNames lists the custom search attributes the namespace needs.
var SearchAttributeNames = []string{
	AttrProjection.GetName(), AttrEventType.GetName(), AttrEntityID.GetName(),
	AttrForkID.GetName(), AttrRetryState.GetName(), AttrIncidentState.GetName(),
}

// RetryWorkflowID is the idempotent ID of the retry workflow of one
// (projection, fork, event): starting it twice finds the same run. Fields are
// escaped (idField), so distinct triples never share an ID.
func RetryWorkflowID(projection, forkID, eventID string) string {
	return "projection-retry:" + idField(projection) + ":" + idField(forkID) + ":" + idField(eventID)
}

// LaneWorkflowID is the ID of the ordering lane of one (projection, fork,
// entity), its fields escaped as in RetryWorkflowID.
func LaneWorkflowID(projection, forkID, entityID string) string {
	return "projection-lane:" + idField(projection) + ":" + idField(forkID) + ":" + idField(entityID)
}

// idField escapes the separator ':' as %3A and the escape '%' as %25, and
// nothing else, so a field without either keeps the ID it had before IDs
// were escaped.
func idField(s string) string {
	if !strings.ContainsAny(s, "%:") {
		return s
	}
	return idEscaper.Replace(s)
}

var idEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// LaneSearchAttributes are a lane's search attributes at start.
func LaneSearchAttributes(projection, forkID, entityID string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		AttrProjection.ValueSet(projection),
		AttrEntityID.ValueSet(entityID),
		AttrForkID.ValueSet(forkID),
	)
}
