package contract

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
)

// Source locates the event's record on the events topic.
type Source struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Timestamp is the record's Kafka timestamp, when its reader kept it
	// (the DLQ's kafka_dlt-original-timestamp header).
	Timestamp time.Time `json:"timestamp,omitzero"`
}

// Attempt is one try at applying the event, kept for the status query, the
// workflow result and the DLQ record.
type Attempt struct {
	// Number is the overall attempt number of its run, 1 being the first.
	Number int `json:"attempt"`
	// Run is 0 for the original schedule and n for the n-th replay.
	Run int `json:"run,omitempty"`
	// StartedAt is absent on an attempt no worker reported starting
	// (LostBeforeStarting).
	StartedAt time.Time `json:"startedAt,omitzero"`
	ErrorKind string    `json:"errorKind,omitempty"`
	Error     string    `json:"error,omitempty"`
	IRVersion int       `json:"irVersion,omitempty"`
	// WaitingBehind, on a failed attempt, is how many later events of the
	// key were parked behind the run when it failed (entity ordering).
	WaitingBehind int64 `json:"waitingBehind,omitempty"`
}

// JoinHoldInput is a run's last failure, as JoinIncidentHold matches it
// against the holding incidents of its projection.
type JoinHoldInput struct {
	Projection string `json:"projection"`
	ErrorKind  string `json:"errorKind"`
	Error      string `json:"error"`
}

// FirstAttempt is the record of a failed attempt 1 run by the bridge.
func FirstAttempt(startedAt time.Time, kind string, err error, irVersion int) *Attempt {
	a := &Attempt{Number: 1, StartedAt: startedAt, ErrorKind: kind, IRVersion: irVersion}
	if err != nil {
		a.Error = err.Error()
	}
	return a
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
	// Replay is set on a run that a bulk replay started after the dead
	// letter's earlier run had closed: who asked for it and why.
	Replay *OperatorSignal `json:"replay,omitempty"`
	// TraceContext, on a parked event with tracing on, is the W3C trace
	// context (traceparent, tracestate, baggage) of its record: the bridge
	// that releases it starts its retry workflow, should it fail again, in
	// that trace.
	TraceContext map[string]string `json:"traceContext,omitempty"`
}

// WorkflowID is the retry workflow's ID (RetryWorkflowID).
func (in RetryInput) WorkflowID() string {
	return RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)
}

// SearchAttributeUpdates set the retry workflow's search attributes
// as at start, in state retrying.
func (in RetryInput) SearchAttributeUpdates() []temporal.SearchAttributeUpdate {
	u := []temporal.SearchAttributeUpdate{
		AttrProjection.ValueSet(in.Projection),
		AttrEventType.ValueSet(in.Event.EventType),
		AttrEntityID.ValueSet(in.Event.EntityID),
		AttrForkID.ValueSet(in.Event.ForkID),
		AttrRetryState.ValueSet(string(StateRetrying)),
	}
	if in.FirstAttempt != nil && in.FirstAttempt.Error != "" {
		u = append(u, AttrError.ValueSet(Short(in.FirstAttempt.Error, SummaryErrorRunes)))
	}
	return u
}

// SearchAttributes are the retry workflow's search attributes at start
// (SearchAttributeUpdates).
func (in RetryInput) SearchAttributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(in.SearchAttributeUpdates()...)
}

// DefaultReplayWindow applies when the input carries no window.
const DefaultReplayWindow = config.DefaultReplayWindow

// ChildSettled is the payload of SignalChildSettled.
type ChildSettled struct {
	WorkflowID string `json:"workflowId"`
	State      State  `json:"state"`
}

// DeadLetterInput is the PublishDeadLetter activity's input: a retry run
// that failed every attempt.
type DeadLetterInput struct {
	Event       event.Envelope `json:"event"`
	Key         []byte         `json:"key,omitempty"`
	Projection  string         `json:"projection"`
	IRVersion   int            `json:"irVersion"`
	Attempts    []Attempt      `json:"attempts"`
	ReplayCount int            `json:"replayCount"`
	Source      Source         `json:"source"`
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
	// LastAction is the last operator decision the run acted on.
	LastAction *OperatorAction `json:"lastAction,omitempty"`
	// WaitingBehind is how many later events of the key were parked behind
	// this run at its last failed attempt (entity ordering).
	WaitingBehind int64 `json:"waitingBehind,omitempty"`
	// HeldBy is the incident a held run waits for (state held).
	HeldBy string `json:"heldBy,omitempty"`
}

// OperatorSignal is the optional payload of the replay and discard signals.
// A workflow cannot see who sent a signal (only its history can), so the
// sender names itself; both fields are free text, for logs and metrics.
type OperatorSignal struct {
	Identity string `json:"identity,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Force, on a replay, applies the event even when its entity has since
	// applied a later one (otherwise the replay is refused).
	Force bool `json:"force,omitempty"`
}

// ReplaySignal is the replay signal's payload.
type ReplaySignal = OperatorSignal

// OperatorAction is an operator decision a retry run acted on.
type OperatorAction struct {
	// Action is the signal's name (replay, discard).
	Action   string    `json:"action"`
	Identity string    `json:"identity,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}
