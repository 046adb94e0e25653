package reliability

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
)

// dlqReplay is the operator's replay of the dead letters the table's
// breaks left, once the migration is fixed and the stream has settled:
// `causet dlq replay --projection rel_effects --error-kind sql` (the
// missing column's error, and the dead-letter-all records of a break's
// incident). verify then holds every event it selected to one of two ends:
// applied once and in order, or refused — dead-lettered again with "replay
// refused" because its entity has applied a later event (the sequence
// guard) — and not applied. A replay's own dead letter and retry run are
// the replay's, not duplicates.
type dlqReplay struct {
	at time.Time
	// selected are the events whose dead letters the replay read;
	// appliedBefore, those of them that had an effect at the replay (a
	// dead letter beside an effect is a defect, replay or not).
	selected, appliedBefore map[string]bool
}

// has reports whether the replay selected the event (false for a nil
// dlqReplay).
func (p *dlqReplay) has(id string) bool { return p != nil && p.selected[id] }

// after reports whether at is the replay's: at or after it started.
func (p *dlqReplay) after(at time.Time) bool { return p != nil && !at.Before(p.at) }

// refusedByReplay reports whether a dead letter is a replay's refusal.
func refusedByReplay(kind, msg string) bool {
	return kind == string(contract.KindInvalidEvent) && strings.Contains(msg, "replay refused")
}

// replayBreakDeadLetters runs the operator's replay and waits for the
// stream to settle again.
func (so *soak) replayBreakDeadLetters(t *testing.T, r *result, evs []evt) {
	s := so.s
	selected, said := s.replaySQLDeadLetters(r, "soak: the migration is fixed")
	if selected == 0 {
		so.note("operator: no dead letter of a break to replay")
		return
	}
	so.note("operator: causet dlq replay of the breaks' %d dead letters: %s", selected, said)
	if !s.waitSettled(r, evs, 10*time.Minute) {
		so.writeReport(t, nil)
		require.Fail(t, "not settled after the replay", "%s; %d parked, %d blocked\ntimeline:\n%s",
			s.progress(), s.parkedCount(), s.blockedKeys(), strings.Join(so.timeline(), "\n"))
	}
	r.fig("replay_settled_s", time.Since(s.replay.at).Round(time.Second).Seconds())
}

// replaySQLDeadLetters is the operator's `causet dlq replay` of
// rel_effects' dead letters of kind sql (a break's, and a last attempt lost
// with its worker), recorded in s.replay for verify. It returns how many
// it selected (0: it ran nothing) and the command's last line.
func (s *stack) replaySQLDeadLetters(r *result, reason string) (selected int, said string) {
	s.t.Helper()
	p := &dlqReplay{selected: map[string]bool{}, appliedBefore: map[string]bool{}}
	applied := s.appliedIn(relProjection)
	for _, d := range s.readDLQ() {
		if d.rec.ProjectionName == relProjection && d.rec.ErrorKind == string(contract.KindSQL) {
			p.selected[d.eventID] = true
			p.appliedBefore[d.eventID] = applied[d.eventID] > 0
		}
	}
	r.fig("replay_selected", len(p.selected))
	if len(p.selected) == 0 {
		return 0, ""
	}
	p.at = time.Now()
	s.replay = p
	out, err := s.causetOutput("dlq", "replay", "--projection", relProjection, "--error-kind", string(contract.KindSQL),
		"--reason", reason)
	require.NoError(s.t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return len(p.selected), lines[len(lines)-1]
}
