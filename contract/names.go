package contract

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Workflow, signal, query and update names (CONTRACT §6).
const (
	RetryWorkflowName = "ProjectionRetryWorkflow"
	SignalReplay      = "replay"
	SignalDiscard     = "discard"
	QueryStatus       = "status"

	// LaneWorkflowName is the ordering lane of the release before parked
	// events: this release runs none, and refuses to start while one is
	// open (its events would wait for a worker that no longer has it).
	LaneWorkflowName = "ProjectionLaneWorkflow"
	// SignalChildSettled is what a retry run started by such a lane tells
	// it when dead-lettered; runs of that release still send it.
	SignalChildSettled = "child_settled"
)

// Activity names as the worker registers them. Workflows refer to them by
// name, so the activities can use the workflow packages' types.
const (
	ApplyProjectionActivity   = "ApplyProjection"
	PublishDeadLetterActivity = "PublishDeadLetter"
	// SettleHeadActivity records that a dead-lettered run no longer holds
	// its key (discarded, or its replay window ended).
	SettleHeadActivity = "SettleHead"
	// JoinIncidentHoldActivity finds the holding incident a run's last
	// failure belongs to (policy hold); IncidentHoldEndedActivity returns
	// where that incident went once it no longer holds, and fails (to be
	// retried by the server, on the retry policy's backoff) while it does.
	// AwaitIncidentEndedActivity is the wait of runs started by earlier
	// releases: it held a worker slot for the whole hold.
	JoinIncidentHoldActivity   = "JoinIncidentHold"
	IncidentHoldEndedActivity  = "IncidentHoldEnded"
	AwaitIncidentEndedActivity = "AwaitIncidentEnded"
	// IncidentStillHoldsType is IncidentHoldEnded's failure while the
	// incident holds.
	IncidentStillHoldsType = "IncidentStillHolds"
	// DatabaseAnswersActivity returns once the database answers a probe
	// and fails (DatabaseOutageType, retried by the server on its backoff)
	// while it does not: a run whose attempt met a database outage waits
	// in it, and the attempt counts as none.
	DatabaseAnswersActivity = "DatabaseAnswers"
	// DatabaseOutageType is the failure of an ApplyProjection attempt that
	// could not reach the database while a probe found it down (never
	// retried by the server: the run waits in DatabaseAnswers, then tries
	// the same attempt again), and of DatabaseAnswers while it is down.
	DatabaseOutageType = "DatabaseOutage"
	// SignalHoldEnded wakes a held run (payload: the incident ID): an
	// incident of its projection left holding, so it asks at once instead
	// of at its next backoff.
	SignalHoldEnded = "hold-ended"
)

// State is a retry workflow's state, also its CausetRetryState search attribute.
type State string

const (
	StateRetrying     State = "retrying"
	StateDeadLettered State = "dead_lettered"
	StateReplaying    State = "replaying"
	StateSucceeded    State = "succeeded"
	StateDiscarded    State = "discarded"
	// StateHeld: its schedule ran out while an incident holds its failure
	// (policy hold): it waits with the incident's events instead of being
	// dead-lettered, and runs its schedule again once the incident is
	// resolved (dead-lettered if the incident dead-letters everything).
	StateHeld State = "held"
)

// Search attributes (Keyword) set at start and upserted on every state change.
var (
	AttrProjection = temporal.NewSearchAttributeKeyKeyword("CausetProjection")
	AttrEventType  = temporal.NewSearchAttributeKeyKeyword("CausetEventType")
	AttrEntityID   = temporal.NewSearchAttributeKeyKeyword("CausetEntityId")
	AttrForkID     = temporal.NewSearchAttributeKeyKeyword("CausetForkId")
	AttrRetryState = temporal.NewSearchAttributeKeyKeyword("CausetRetryState")
	// AttrError is the run's latest failure in a few words (at most
	// SummaryErrorRunes): set at start from the bridge's attempt 1, and
	// again when the run is dead-lettered or held, in the upsert of its
	// state. It makes the error a column of the UI's workflow list.
	AttrError = temporal.NewSearchAttributeKeyKeyword("CausetError")
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
	AttrForkID.GetName(), AttrRetryState.GetName(), AttrIncidentState.GetName(), AttrError.GetName(),
}

// OpenRetryRunsQuery is the visibility query of the open retry runs on
// taskQueue in state (dead-lettered ones for the DLQ gauges, held ones for
// an incident's end to wake).
func OpenRetryRunsQuery(taskQueue string, state State) string {
	return fmt.Sprintf(`WorkflowType = %q AND ExecutionStatus = "Running" AND %s = %q AND TaskQueue = %q`,
		RetryWorkflowName, AttrRetryState.GetName(), state, taskQueue)
}

// RetryWorkflowID is the idempotent ID of the retry workflow of one
// (projection, fork, event): starting it twice finds the same run. Fields are
// escaped (idField), so distinct triples never share an ID.
func RetryWorkflowID(projection, forkID, eventID string) string {
	return "projection-retry:" + idField(projection) + ":" + idField(forkID) + ":" + idField(eventID)
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
