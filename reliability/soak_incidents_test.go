package reliability

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
)

// The soak's incidents. Twice during the faults rel_effects is broken as a
// bad migration breaks it (its ratio column renamed for 40-70 s, then
// renamed back: the fix), so that every event of the projection fails one
// way and an incident opens. Seeds alternate the policy: odd seeds run
// CAUSET_INCIDENT_POLICY=hold (the break's events are parked and released
// in entity order once the probe sees the fix; the second break is a
// reopen of the same fingerprint; on coins of the seed the operator
// dead-letters the first hold halfway through its break, which the failure
// going on reopens, and resolves the second with `causet incidents
// resolve` as the fix lands), even
// seeds the default dead-letter (every event keeps its own schedule, and
// one caught by the break may be dead-lettered: verify accepts that of it
// and nothing more). The incident window is 10 s with a threshold of 50,
// so that the break opens its incident within seconds while the
// division-by-zero failures of the stream (about one a second) open one
// only after a long backlog; a hold of those, which no fix ends, is
// resolved by the operator (its events then take their own schedules).
// Afterwards every incident run must have ended, no row may still hold,
// release or dead-letter, and the breaks must have opened an incident.

// soakIncidents is the soak's incident settings for the seed.
func soakIncidents(seed uint64) (env map[string]string, hold bool) {
	hold = seed%2 == 1
	env = map[string]string{"CAUSET_INCIDENT_WINDOW": "10s", "CAUSET_INCIDENT_THRESHOLD": "50"}
	if hold {
		env["CAUSET_INCIDENT_POLICY"] = string(config.IncidentHold)
	}
	return env, hold
}

// breakTable breaks rel_effects twice, at times drawn from the seed (a
// schedule of its own), and returns a function that waits for both fixes.
func (so *soak) breakTable(seed uint64, d time.Duration, hold bool) (fixed func()) {
	rng := rand.New(rand.NewPCG(seed, 0x6272656b))
	so.s.breaks = &tableBreaks{}
	at := []time.Duration{d*15/100 + time.Duration(rng.Int64N(int64(d*15/100))), d*55/100 + time.Duration(rng.Int64N(int64(d/10)))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, when := range at {
			long := min(40*time.Second+time.Duration(rng.Int64N(int64(30*time.Second))), d/6)
			byOperator := hold && i == 1 && rng.IntN(2) == 0
			deadLetterAll := hold && i == 0 && rng.IntN(2) == 0
			time.Sleep(time.Until(so.start.Add(when)))
			from, since := time.Now(), so.since()
			if !so.untilRenamed(brokenColumn, brokenColumn+"_moved", 2*time.Minute) {
				continue
			}
			so.note("rel_effects broken: column %s renamed for %s", brokenColumn, long.Round(100*time.Millisecond))
			if deadLetterAll {
				// The operator gives up on the hold before the fix: its events
				// are dead-lettered, and the failure going on reopens it.
				time.Sleep(long / 2)
				so.decideHolds(true, "dead-letter-all", "soak: the fix is not ready")
				time.Sleep(long - long/2)
			} else {
				time.Sleep(long)
			}
			if !so.untilRenamed(brokenColumn+"_moved", brokenColumn, 5*time.Minute) {
				continue // the drain fails on it, with the timeline
			}
			so.s.breaks.add(from, time.Now())
			so.record(soakFault{"break", "rel_effects", since, so.since()})
			so.note("rel_effects fixed: column renamed back")
			if byOperator {
				so.decideHolds(true, "resolve", "soak: the column is back")
			}
		}
	}()
	return func() { <-done }
}

// untilRenamed renames rel_effects' column from to to, tried every 2 s
// (PostgreSQL may be down or out of reach) for at most within. A rename
// whose reply was lost may have committed: the column already gone is done.
func (so *soak) untilRenamed(from, to string, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(2 * time.Second) {
		err := so.s.renameColumn(from, to)
		var pg *pgconn.PgError
		if err == nil || errors.As(err, &pg) && pg.Code == "42703" {
			return true
		}
	}
	so.note("rel_effects: column %s not renamed to %s within %s", from, to, within)
	return false
}

// decideHolds takes, as an operator, decision ("resolve" or
// "dead-letter-all") on the holding incidents of the break (breaks) or of
// any other failure (!breaks) with `causet incidents <decision>`, tried
// again for a minute while a dependency is down.
func (so *soak) decideHolds(breaks bool, decision, reason string) {
	ctx, cancel := context.WithTimeout(so.s.ctx, 5*time.Second)
	rows, err := so.s.pool.Query(ctx, `SELECT id, input->>'pattern' FROM causet_incidents WHERE state = 'holding'`)
	var ids []string
	if err == nil {
		for rows.Next() {
			var id, pattern string
			if rows.Scan(&id, &pattern) == nil && isBreakError(pattern) == breaks {
				ids = append(ids, id)
			}
		}
		rows.Close()
	}
	cancel()
	for _, id := range ids {
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(5 * time.Second) {
			out, err := so.s.causetOutput("incidents", decision, id, "--reason", reason, "--identity", "soak@operator")
			if err == nil {
				if decision == "dead-letter-all" {
					so.s.breaks.deadLetteredAll(id)
				}
				so.note("incidents %s %s: %s", decision, id, oneLine(strings.TrimSpace(out)))
				break
			}
			so.note("incidents %s %s refused, tried again in 5 s: %s", decision, id, oneLine(err.Error()))
		}
	}
}

// resolveStrayHolds resolves, every 5 s until stopped, a hold that is not
// the break's: per-event failures that a backlog counted past the
// threshold, which no fix ends.
func (so *soak) resolveStrayHolds() (stop func()) {
	return every(5*time.Second, func() {
		so.decideHolds(false, "resolve", "soak: failures of single events, not systemic")
	})
}

// incidentsEnded requires, once drained, every incident run to have ended
// and no row left holding, releasing or dead-lettering; the breaks to have
// opened an incident (one that held events, under hold); and each of the
// break's incidents to have ended resolved, but one the operator
// dead-lettered. (A break that comes while the hold before it still drains
// its dead-letter-all — its run slowed by an outage — takes the normal
// path: a row that dead-letters is not reopened until its run has drained
// its own hold, CONTRACT §12.)
func (so *soak) incidentsEnded(t *testing.T, r *result, hold bool) {
	s := so.s
	require.Eventually(t, func() bool {
		for _, e := range s.workflowsOnQueue(contract.IncidentWorkflowName) {
			if e.Running() {
				return false
			}
		}
		return s.tryCount(`SELECT count(*) FROM causet_incidents WHERE state IN ('holding', 'releasing', 'dead_lettering')`) == 0
	}, 4*time.Minute, 2*time.Second, "an incident is still open: %s", so.incidentStates())
	runs := s.workflowsOnQueue(contract.IncidentWorkflowName)
	byBreak, held, deadLettered, other := 0, 0, 0, 0
	seen := map[string]bool{}
	for _, e := range runs {
		var st contract.IncidentStatus
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		err := s.temporal.Client.GetWorkflow(ctx, e.ID, e.RunID).Get(ctx, &st)
		cancel()
		require.NoError(t, err, "incident run %s/%s", e.ID, e.RunID)
		// A run that continued as new answers with its chain's last: each
		// hold is counted once.
		chain := e.ID + " " + st.FirstSeen.String()
		if seen[chain] {
			continue
		}
		seen[chain] = true
		caughtUp := "never"
		if st.CaughtUpAt != nil {
			caughtUp = st.CaughtUpAt.Sub(so.start).Round(100 * time.Millisecond).String()
		}
		so.note("incident %s (%s): %s by %s, %d affected, %d held, drained at %s", e.ID, st.Pattern, st.State, st.ResolvedBy,
			st.EventsAffected, st.EventsHeld, caughtUp)
		if !isBreakError(st.Pattern) {
			other++
			continue
		}
		byBreak++
		if st.EventsHeld > 0 {
			held++
		}
		if st.State == contract.IncidentDeadLettered && st.ResolvedBy == "soak@operator" {
			deadLettered++
			continue
		}
		require.Equal(t, contract.IncidentResolved, st.State, "the break's incident %s ended resolved: %+v", e.ID, st)
	}
	r.fig("incident_runs", len(runs))
	r.fig("incidents_of_breaks", byBreak)
	r.fig("incidents_of_breaks_held", held)
	r.fig("incidents_of_breaks_dead_lettered", deadLettered)
	r.fig("incidents_other", other)
	require.Positive(t, byBreak, "the breaks opened no incident:\n%s", strings.Join(so.timeline(), "\n"))
	if hold {
		require.Positive(t, held, "no break's incident held an event:\n%s", strings.Join(so.timeline(), "\n"))
	}
}

// incidentStates lists the incidents' rows, for a failure message.
func (so *soak) incidentStates() string {
	ctx, cancel := context.WithTimeout(so.s.ctx, 5*time.Second)
	defer cancel()
	rows, err := so.s.pool.Query(ctx, `SELECT id || ' ' || state || ' ' || (input->>'pattern') FROM causet_incidents ORDER BY opened_at`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var x string
		if rows.Scan(&x) == nil {
			out = append(out, x)
		}
	}
	return strings.Join(out, "; ")
}

// waitSettled waits, for at most within, until the stream has settled:
// nothing parked or blocked, no retry run retrying, held or replaying, at
// least a DLQ record per failing event, and the effects and the DLQ
// unchanged for 10 s. (A break may leave succeeding events dead-lettered,
// so counting effects up to the succeeding events, as waitDrained does,
// would wait for ones that never come.)
func (s *stack) waitSettled(r *result, evs []evt, within time.Duration) bool {
	failing := 0
	for _, e := range evs {
		if e.fails {
			failing++
		}
	}
	open := func() int64 {
		var n int64
		for _, st := range []contract.State{contract.StateRetrying, contract.StateHeld, contract.StateReplaying} {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			resp, err := s.temporal.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: contract.OpenRetryRunsQuery(s.taskQueue, st)})
			cancel()
			if err != nil {
				return -1
			}
			n += resp.GetCount()
		}
		return n
	}
	var last [2]int64
	stable := time.Time{}
	said := time.Now()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(time.Second) {
		var dl int64
		for _, e := range s.endOffsets(s.dlqTopic) {
			dl += e
		}
		now := [2]int64{int64(s.tryCount(`SELECT count(*) FROM rel_effects`)), dl}
		parked, blocked, runs := s.parkedCount(), s.blockedKeys(), open()
		if now != last || dl < int64(failing) || parked != 0 || blocked != 0 || runs != 0 {
			if time.Since(said) >= time.Minute {
				// What a long wait waits for, in the log as it goes.
				s.t.Logf("not settled yet: %d effects, %d dead letters for %d failing events, %d parked, %d blocked keys, %d retry runs open (-1: unknown)",
					now[0], dl, failing, parked, blocked, runs)
				said = time.Now()
			}
			last, stable = now, time.Time{}
			continue
		}
		if stable.IsZero() {
			stable = time.Now()
		}
		if time.Since(stable) >= 10*time.Second {
			r.fig("dlq_end_offset", dl)
			return true
		}
	}
	return false
}
