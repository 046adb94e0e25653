package contract

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
)

// Incidents: one systemic failure (many events of one projection failing
// the same way) is one ProjectionIncidentWorkflow, not one retry workflow
// and dead letter per event (CONTRACT §12).
const (
	IncidentWorkflowName = "ProjectionIncidentWorkflow"
	// SignalIncidentFailures carries more affected events (IncidentFailures)
	// from a bridge.
	SignalIncidentFailures = "failures"
	// SignalResolve closes the incident as fixed: held events are released.
	SignalResolve = "resolve"
	// SignalDeadLetterAll closes the incident and dead-letters every held event.
	SignalDeadLetterAll = "dead-letter-all"
	// SignalDeployed asks for a probe now: a new IR version was deployed.
	SignalDeployed = "deployed"
)

// Incident activities.
const (
	ProbeIncidentActivity         = "ProbeIncident"
	SetIncidentStateActivity      = "SetIncidentState"
	AwaitIncidentReleasedActivity = "AwaitIncidentReleased"
	// IncidentRestartActivity returns a new run's input for an incident
	// whose row holds (releases, dead-letters) events, nil when it ended.
	IncidentRestartActivity = "IncidentRestart"
	DeadLetterHeldActivity  = "DeadLetterHeld"
)

// IncidentState is an incident's state, also its CausetIncidentState search
// attribute and its causet_incidents row's state.
type IncidentState string

const (
	// IncidentOpen: the fingerprint keeps failing; events are dead-lettered
	// on their own schedules (policy dead-letter).
	IncidentOpen IncidentState = "open"
	// IncidentHolding: the fingerprint keeps failing; its events are parked
	// (policy hold).
	IncidentHolding IncidentState = "holding"
	// IncidentReleasing: resolved; parked events are being applied in order.
	IncidentReleasing IncidentState = "releasing"
	// IncidentResolved: resolved and, under hold, every parked event released.
	IncidentResolved IncidentState = "resolved"
	// IncidentDeadLettering: an operator (or a hold bound) chose to
	// dead-letter the held events; the bridges are dead-lettering them. Like
	// releasing, the row does not reopen until its run has moved it on.
	IncidentDeadLettering IncidentState = "dead_lettering"
	// IncidentDeadLettered: an operator dead-lettered every held event.
	IncidentDeadLettered IncidentState = "dead_lettered"
)

// Held reports whether events of the incident's fingerprint are parked.
func (s IncidentState) Held() bool { return s == IncidentHolding }

// AttrIncidentState is the incident workflow's state search attribute.
var AttrIncidentState = temporal.NewSearchAttributeKeyKeyword("CausetIncidentState")

// IncidentWorkflowID is the ID of the incident of one failure fingerprint of
// a projection: every bridge that sees it signals the same workflow.
func IncidentWorkflowID(projection, fingerprint string) string {
	return "projection-incident:" + idField(projection) + ":" + fingerprint
}

// IncidentInput starts (or continues) a ProjectionIncidentWorkflow.
type IncidentInput struct {
	Projection  string                `json:"projection"`
	Fingerprint string                `json:"fingerprint"`
	Policy      config.IncidentPolicy `json:"policy"`
	ErrorKind   string                `json:"errorKind"`
	// SQLState is the PostgreSQL error code, when the failure has one.
	SQLState string `json:"sqlState,omitempty"`
	// Error is the first failure's message; Pattern is it with values stripped.
	Error   string `json:"error"`
	Pattern string `json:"pattern"`
	// Sample is the event the incident probes with: applied in a transaction
	// that is rolled back, so a probe never applies anything.
	Sample event.Envelope `json:"sample"`
	// Retry is the probe schedule (the seed's backoff, capped at its max).
	Retry config.Retry `json:"retry"`
	// HoldMax and MaxHeld bound a hold (policy hold): past either, every
	// held event is dead-lettered (CAUSET_INCIDENT_HOLD_MAX,
	// CAUSET_INCIDENT_MAX_HELD). Zero: no bound.
	HoldMax time.Duration `json:"holdMax,omitempty"`
	MaxHeld int           `json:"maxHeld,omitempty"`
	// QuietClose closes an incident of policy dead-letter once no failure
	// has been reported for this long (ten incident windows). Zero: never.
	QuietClose time.Duration `json:"quietClose,omitempty"`
	// Status carries the state across continue-as-new.
	Status *IncidentStatus `json:"status,omitempty"`
}

// IncidentFailures is the payload of SignalIncidentFailures: events a
// bridge saw fail with the incident's fingerprint since its last signal.
type IncidentFailures struct {
	// Key identifies the report: a run counts a report of one key once,
	// however often a bridge sends it.
	Key      string    `json:"key,omitempty"`
	Events   int       `json:"events"`
	Held     int       `json:"held"`
	EventIDs []string  `json:"eventIds,omitempty"`
	At       time.Time `json:"at"`
}

// MaxIncidentSamples bounds the sample event IDs an incident keeps.
const MaxIncidentSamples = 10

// IncidentStatus answers the incident's status query and is its result.
type IncidentStatus struct {
	State       IncidentState         `json:"state"`
	Projection  string                `json:"projection"`
	Fingerprint string                `json:"fingerprint"`
	Policy      config.IncidentPolicy `json:"policy"`
	ErrorKind   string                `json:"errorKind"`
	SQLState    string                `json:"sqlState,omitempty"`
	Error       string                `json:"error"`
	Pattern     string                `json:"pattern"`
	FirstSeen   time.Time             `json:"firstSeen"`
	LastSeen    time.Time             `json:"lastSeen"`
	// EventsAffected counts the failing events the bridges reported (the
	// ones before the threshold included); EventsHeld those parked.
	EventsAffected int        `json:"eventsAffected"`
	EventsHeld     int        `json:"eventsHeld"`
	SampleEventIDs []string   `json:"sampleEventIds,omitempty"`
	Probes         int        `json:"probes"`
	LastProbeAt    *time.Time `json:"lastProbeAt,omitempty"`
	LastProbeError string     `json:"lastProbeError,omitempty"`
	NextProbeAt    *time.Time `json:"nextProbeAt,omitempty"`
	ResolvedAt     *time.Time `json:"resolvedAt,omitempty"`
	// ResolvedBy is "probe" or the operator's identity.
	ResolvedBy string `json:"resolvedBy,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// CaughtUpAt is when the last parked event was released.
	CaughtUpAt *time.Time `json:"caughtUpAt,omitempty"`
}

// ProbeFailedType is the ApplicationError type of a probe whose sample
// still fails with the incident's error: the activity fails (shown as
// failed in the Temporal UI), not retried, with the ProbeResult as details.
const ProbeFailedType = "ProbeFailed"

// ProbeResult is the ProbeIncident activity's answer. OK: the sample
// applies, or fails another way than the incident (OtherError).
type ProbeResult struct {
	OK         bool   `json:"ok"`
	Error      string `json:"error,omitempty"`
	OtherError string `json:"otherError,omitempty"`
	IRVersion  int    `json:"irVersion,omitempty"`
}

// IncidentSearchAttributes are the incident workflow's search attributes.
func IncidentSearchAttributes(projection string, s IncidentState) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(AttrProjection.ValueSet(projection), AttrIncidentState.ValueSet(string(s)))
}

// Settled reports whether the incident has closed its decision.
func (s IncidentState) Settled() bool { return s == IncidentResolved || s == IncidentDeadLettered }
