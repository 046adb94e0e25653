package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
)

// The rollout of a fixed projection (CONTRACT §15): check a candidate IR
// document against the events failing now, deploy it, replay what it fixes.
const (
	RolloutWorkflowName = "ProjectionRolloutWorkflow"
	// QueryRolloutProgress answers a RolloutProgress.
	QueryRolloutProgress = "progress"

	CheckCandidateActivity  = "CheckCandidate"
	DeployCandidateActivity = "DeployCandidate"
	ReplayFailingActivity   = "ReplayFailing"
	CountSettledActivity    = "CountSettled"
)

// Search attributes (Int) a rollout upserts as it goes, so the UI's list
// shows every rollout's progress.
var (
	AttrRolloutAffected = temporal.NewSearchAttributeKeyInt64("CausetRolloutAffected")
	AttrRolloutApplied  = temporal.NewSearchAttributeKeyInt64("CausetRolloutApplied")
	AttrRolloutFailing  = temporal.NewSearchAttributeKeyInt64("CausetRolloutFailing")
)

// IntSearchAttributeNames lists the custom Int search attributes the
// namespace needs.
var IntSearchAttributeNames = []string{
	AttrRolloutAffected.GetName(), AttrRolloutApplied.GetName(), AttrRolloutFailing.GetName(),
}

// RolloutWorkflowID is the rollout's ID: one per (projection, version it
// deploys, candidate document), so starting the same rollout twice finds
// the same run, and a different candidate with the same version never
// joins it. candidate is the document as RolloutInput.Document carries it
// (its canonical JSON); the ID names the first 12 hex digits of its
// SHA-256.
func RolloutWorkflowID(projection string, version int, candidate []byte) string {
	return "projection-rollout:" + idField(projection) + ":" + strconv.Itoa(version) + ":" + CandidateHash(candidate)
}

// CandidateHash is the short content hash of a candidate document that
// rollout IDs name.
func CandidateHash(candidate []byte) string {
	sum := sha256.Sum256(candidate)
	return hex.EncodeToString(sum[:6])
}

// Defaults of a rollout.
const (
	// DefaultRolloutMaxFailing is the share of affected events that may
	// still fail, at the check or after the replays, before the rollout
	// stops.
	DefaultRolloutMaxFailing = 0.1
	// DefaultRolloutRate is how many replays a second a rollout sends.
	DefaultRolloutRate = 20
	// DefaultRolloutLimit bounds the events a rollout checks and replays.
	DefaultRolloutLimit = 10_000
	// MaxRolloutLimit is the most --limit accepts.
	MaxRolloutLimit = 100_000
)

// RolloutInput starts a rollout.
type RolloutInput struct {
	Projection string `json:"projection"`
	// Document is the candidate IR document (JSON).
	Document json.RawMessage `json:"document"`
	// Version is the version the rollout deploys the candidate as (the
	// newest deployed one when it is deployed already).
	Version int `json:"version"`
	// MaxFailing is the share of affected events that may still fail.
	MaxFailing float64 `json:"maxFailing"`
	// Rate is the replays per second.
	Rate float64 `json:"rate"`
	// Limit bounds the events checked and replayed.
	Limit int `json:"limit"`
	// Identity and Reason go with every replay signal.
	Identity string `json:"identity,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Resume is where a run that continued as new goes on from; nil for a
	// rollout's first run.
	Resume *RolloutResume `json:"resume,omitempty"`
}

// RolloutResume carries a rollout's progress into the next run when it
// continues as new (its history kept short): it neither checks nor
// deploys again, and replays after After, or settles until SettleUntil.
type RolloutResume struct {
	Progress RolloutProgress `json:"progress"`
	// After is the last replayed dead letter's sequence.
	After int `json:"after"`
	// Deployed is the deploy's answer; Since is when failing is counted
	// from.
	Deployed DeployCandidateResult `json:"deployed"`
	Since    time.Time             `json:"since"`
	// SettleUntil is set once every dead letter was replayed: the end of
	// the wait for the affected events to settle.
	SettleUntil *time.Time `json:"settleUntil,omitempty"`
}

// RolloutState is where a rollout is.
type RolloutState string

const (
	RolloutChecking  RolloutState = "checking"
	RolloutDeploying RolloutState = "deploying"
	RolloutReplaying RolloutState = "replaying"
	RolloutSettling  RolloutState = "settling"
	// RolloutDone: every affected event was replayed and settled, and the
	// share still failing is within MaxFailing.
	RolloutDone RolloutState = "done"
	// RolloutStopped: the share still failing went over MaxFailing, at the
	// check (nothing deployed) or after the replays.
	RolloutStopped RolloutState = "stopped"
	// RolloutCancelled: an operator cancelled it.
	RolloutCancelled RolloutState = "cancelled"
)

// RolloutProgress is a rollout's progress query answer and its result.
type RolloutProgress struct {
	State      RolloutState `json:"state"`
	Projection string       `json:"projection"`
	Version    int          `json:"version"`
	Deployed   bool         `json:"deployed"`
	// Affected are the failing events the check found; WouldApply and
	// WouldFail what it said of them.
	Affected   int `json:"affected"`
	WouldApply int `json:"wouldApply"`
	WouldFail  int `json:"wouldFail"`
	OutOfOrder int `json:"outOfOrder"`
	// Replayed dead letters were signalled or restarted (or found
	// replaying or applied since the check: a batch retried after a kill
	// finds so the one it had sent); Applied and
	// Failing count the affected events settled after the deploy (applied,
	// or dead-lettered again), Pending those not settled yet.
	Replayed int `json:"replayed"`
	Applied  int `json:"applied"`
	Failing  int `json:"failing"`
	Pending  int `json:"pending"`
	// Reason says why a rollout stopped.
	Reason    string    `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// CheckCandidateResult is the CheckCandidate activity's answer. The
// affected events themselves are recorded in PostgreSQL under the
// rollout's workflow ID (causet_rollout_events), not in the history.
type CheckCandidateResult struct {
	Affected   int `json:"affected"`
	WouldApply int `json:"wouldApply"`
	WouldFail  int `json:"wouldFail"`
	OutOfOrder int `json:"outOfOrder"`
	// ToReplay counts the dead letters the candidate would apply.
	ToReplay int `json:"toReplay"`
	// Summary is the check's report as text, for the workflow's details.
	Summary string `json:"summary"`
}

// DeployCandidateResult is the DeployCandidate activity's answer.
type DeployCandidateResult struct {
	Version int `json:"version"`
	// AlreadyDeployed is set when the newest deployed document was the
	// candidate already (a rollout started again, or an activity retried).
	AlreadyDeployed bool      `json:"alreadyDeployed,omitempty"`
	DeployedAt      time.Time `json:"deployedAt"`
}

// ReplayFailingInput replays the next dead letters of a rollout: those
// after sequence After, at most Batch of them, at Rate a second.
type ReplayFailingInput struct {
	RolloutID string  `json:"rolloutId"`
	After     int     `json:"after"`
	Batch     int     `json:"batch"`
	Rate      float64 `json:"rate"`
	Identity  string  `json:"identity,omitempty"`
	Reason    string  `json:"reason,omitempty"`
}

// ReplayFailingResult says how far a batch of replays went.
type ReplayFailingResult struct {
	// Next is the sequence to continue after; Done is set when no dead
	// letter is left after it.
	Next     int  `json:"next"`
	Done     bool `json:"done"`
	Replayed int  `json:"replayed"`
	// Tried counts the dead letters of the batch handled so far (a retried
	// batch goes on with the rest).
	Tried int `json:"tried"`
	// Refused and Failed count dead letters the replayer refused (an
	// entity that applied a later event) or could not replay.
	Refused int `json:"refused,omitempty"`
	Failed  int `json:"failed,omitempty"`
}

// CountSettledInput asks how a rollout's affected events stand since the
// deploy.
type CountSettledInput struct {
	RolloutID  string `json:"rolloutId"`
	Projection string `json:"projection"`
	// DeployedAt is when failing is counted from: the deploy, or the
	// rollout's start when the candidate was deployed before it.
	DeployedAt time.Time `json:"deployedAt"`
	// Version is the version the rollout deployed; a newer one deployed
	// since is reported as Superseded. 0: not checked.
	Version int `json:"version,omitempty"`
}

// SettledCount is the CountSettled activity's answer over the events the
// rollout acts on (the check said they would apply): Applied have a
// ledger row, Failing were dead-lettered again after the deploy, Pending
// neither yet.
type SettledCount struct {
	Applied int `json:"applied"`
	Failing int `json:"failing"`
	Pending int `json:"pending"`
	// Superseded is the newest deployed version when someone deployed one
	// after the rollout's (0 otherwise): the rollout stops.
	Superseded int `json:"superseded,omitempty"`
	// Replayed is how many dead letters the count replayed: runs the check
	// found on their schedule that were dead-lettered before the deploy.
	Replayed int `json:"replayed,omitempty"`
}

// CurrentDetails are the rollout's current details on its Temporal UI
// page: where it is and its counts.
func (p RolloutProgress) CurrentDetails() string {
	var b strings.Builder
	printf(&b, "**%s** · version %d", p.State, p.Version)
	if p.Deployed {
		b.WriteString(" deployed")
	}
	printf(&b, " · %d affected: check said %d would apply, %d still fail, %d out of order", p.Affected, p.WouldApply, p.WouldFail, p.OutOfOrder)
	if p.Deployed {
		printf(&b, " · %d replayed · **%d applied**, %d failing again, %d pending", p.Replayed, p.Applied, p.Failing, p.Pending)
	}
	if p.Reason != "" {
		printf(&b, "\n\n%s", p.Reason)
	}
	return b.String()
}

// Summary is the rollout's one line in the UI's list.
func (in RolloutInput) Summary() string {
	return fmt.Sprintf("roll out %s version %d", in.Projection, in.Version)
}

// InvalidCandidateType is the application error type of a candidate
// document that does not validate: no retry can fix it.
const InvalidCandidateType = "InvalidCandidate"

// RolloutStoppedType is the application error type a stopped rollout
// ends with; its details are the RolloutProgress.
const RolloutStoppedType = "RolloutStopped"

// RolloutSupersededType is the error type of a DeployCandidate that found
// another version deployed since the rollout started: not retried.
const RolloutSupersededType = "RolloutSuperseded"
