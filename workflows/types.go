// Package workflows holds ProjectionRetryWorkflow, its signals, queries and
// search attributes, and the types shared by the bridge, the activities and
// the DLQ tooling.
package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
)

// Names of the Temporal contract (CONTRACT §6).
const (
	RetryWorkflowName = "ProjectionRetryWorkflow"
	LaneWorkflowName  = "ProjectionLaneWorkflow"
	SignalReplay      = "replay"
	SignalDiscard     = "discard"
	QueryStatus       = "status"
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

// SearchAttributeNames lists the custom search attributes the namespace needs.
var SearchAttributeNames = []string{
	AttrProjection.GetName(), AttrEventType.GetName(), AttrEntityID.GetName(),
	AttrForkID.GetName(), AttrRetryState.GetName(),
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

// Source locates the event's record on the events topic.
type Source struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Attempt is one try at applying the event, kept for the status query, the
// workflow result and the DLQ record.
type Attempt struct {
	// Number is the overall attempt number of its run, 1 being the first.
	Number int `json:"attempt"`
	// Run is 0 for the original schedule and n for the n-th replay.
	Run       int       `json:"run,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	ErrorKind string    `json:"errorKind,omitempty"`
	Error     string    `json:"error,omitempty"`
	IRVersion int       `json:"irVersion,omitempty"`
}

// RetryInput starts a ProjectionRetryWorkflow.
type RetryInput struct {
	Event      event.Envelope `json:"event"`
	Projection string         `json:"projection"`
	// Key is the Kafka record key, kept for the DLQ record.
	Key    []byte      `json:"key,omitempty"`
	Source Source      `json:"source"`
	Mode   config.Mode `json:"mode"`
	// FirstAttempt is the bridge's failed attempt 1 in inline mode; nil in workflow mode.
	FirstAttempt *Attempt `json:"firstAttempt,omitempty"`
	// Retry is the schedule in force when the event first failed; fixed for
	// the workflow's life so its history replays the same.
	Retry config.Retry `json:"retry"`
	// ReplayWindow is how long a dead-lettered run waits for replay or discard.
	ReplayWindow time.Duration `json:"replayWindow"`
	// WaitFor, on an event sent to a lane, is the retry workflow of an
	// earlier event of the key that the bridge started outside the lane:
	// the lane runs this event only once that workflow has settled.
	WaitFor string `json:"waitFor,omitempty"`
}

// DLQCoordinates locate a published dead letter.
type DLQCoordinates struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Status answers the status query and is the workflow's result.
type Status struct {
	State      State     `json:"state"`
	Projection string    `json:"projection"`
	EventID    string    `json:"eventId"`
	Attempts   []Attempt `json:"attempts"`
	IRVersion  int       `json:"irVersion,omitempty"`
	// NextRetryAt is when the next attempt is due while retrying or replaying.
	NextRetryAt *time.Time `json:"nextRetryAt,omitempty"`
	// Schedule is the planned start of each remaining attempt of the current run.
	Schedule    []time.Time     `json:"schedule,omitempty"`
	ReplayCount int             `json:"replayCount"`
	DLQ         *DLQCoordinates `json:"dlq,omitempty"`
	// LastReplayReason is the reason given with the last replay signal.
	LastReplayReason string `json:"lastReplayReason,omitempty"`
}

// ReplaySignal is the optional payload of the replay signal.
type ReplaySignal struct {
	Reason string `json:"reason,omitempty"`
}
