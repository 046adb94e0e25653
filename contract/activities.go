package contract

import (
	"fmt"
	"time"

	"github.com/causet/projection-retry/event"
)

// ApplyTimeout is the StartToClose timeout of one ApplyProjection attempt.
const ApplyTimeout = time.Minute

// ApplyHeartbeatTimeout is the heartbeat timeout of an ApplyProjection
// attempt, which heartbeats throughout: an attempt the server handed to a
// worker that never got it (a poll answered into a connection a hung proxy
// swallows) is retried after it, not after ApplyTimeout.
const ApplyHeartbeatTimeout = 10 * time.Second

// ApplyInput is the ApplyProjection activity's input.
type ApplyInput struct {
	Event      event.Envelope `json:"event"`
	Projection string         `json:"projection"`
	// Run is 0 for the original schedule, n for the n-th replay.
	Run int `json:"run,omitempty"`
	// FirstAttempt is the overall number of the activity's first attempt (2 in
	// inline mode, where the bridge made attempt 1).
	FirstAttempt int `json:"firstAttempt"`
	// Delays is the plan's waits between attempts, for the nextRetryIn log field.
	Delays []time.Duration `json:"delays"`
	// MaxAttempts is the total number of attempts of a run.
	MaxAttempts int `json:"maxAttempts"`
	// Force applies a replayed event even when its entity has applied a
	// later one (the replay signal's "force").
	Force bool `json:"force,omitempty"`
	// Restarted is set on every run of a workflow that a bulk replay
	// started after the dead letter's earlier run had closed: its attempts
	// are replays, checked by the sequence guard like a signalled one's.
	Restarted bool `json:"restarted,omitempty"`
}

// MaxLostAttempts bounds the last attempts of one run that are lost with
// their worker (the server timed them out on their heartbeat: the worker
// was killed, stopped, cut off from Temporal, or Temporal was down) and
// tried again rather than counted: past it a lost attempt counts as timed
// out, so an event that kills every worker it runs on is still
// dead-lettered.
const MaxLostAttempts = 3

// ApplyOutput is ApplyProjection's result on success.
type ApplyOutput struct {
	IRVersion int  `json:"irVersion"`
	Duplicate bool `json:"duplicate,omitempty"`
	// Attempts are the activity's failed attempts before the one that succeeded.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Attempt is the overall number of the attempt that succeeded.
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"startedAt"`
}

// SettleUnreported marks as timed out every attempt in attempts that started
// but never reported its outcome. ApplyProjection records each attempt in its
// heartbeat details as it starts, so an attempt that overran its
// StartToClose timeout (or whose worker was lost, which the server also ends
// as a timeout) is still there with its number and start time.
func SettleUnreported(attempts []Attempt) []Attempt {
	for i := range attempts {
		if attempts[i].ErrorKind == "" {
			attempts[i].ErrorKind = string(KindSQL)
			attempts[i].Error = fmt.Sprintf("attempt timed out after %s", ApplyTimeout)
		}
	}
	return attempts
}

// LostBeforeStarting is the error of an attempt that no worker reported
// starting: the server handed it to a worker that never ran it (a poll
// answered into a closing connection, a worker killed as it received it)
// and timed it out.
const LostBeforeStarting = "attempt timed out before any worker reported starting it"

// RecordLost adds to attempts, the record of a scheduled ApplyProjection's
// attempts before attempt number, each attempt between them that left no
// record (first is the number of the scheduled activity's first attempt),
// so that the record shows every attempt the server made. Such an attempt
// has no start time.
func RecordLost(attempts []Attempt, first, number, run int) []Attempt {
	next := first
	if len(attempts) > 0 {
		next = attempts[len(attempts)-1].Number + 1
	}
	for n := next; n < number; n++ {
		attempts = append(attempts, Attempt{Number: n, Run: run, ErrorKind: string(KindSQL), Error: LostBeforeStarting})
	}
	return attempts
}

// SetIncidentStateInput is the SetIncidentState activity's input.
type SetIncidentStateInput struct {
	ID    string        `json:"id"`
	State IncidentState `json:"state"`
	// From are the states the row moves from (a compare-and-set); empty
	// (runs before it was sent): holding or releasing.
	From []IncidentState `json:"from,omitempty"`
}
