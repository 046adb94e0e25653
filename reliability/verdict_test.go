package reliability

import (
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
)

// verdict compares the world with the produced events.
type verdict struct {
	ordering                                ordering
	produced, succeeded, failing            int
	lost, doubleApplied, appliedFailing     int
	ledger                                  int
	workflows, dupWorkflows, missingWF      int
	unexpectedWF, workflowsBehind           int
	inversions                              int
	dlq, dlqDup, dlqMissing, dlqUnexpect    int
	examplesLost, examplesDouble, exDLQMiss []string
	examplesUnexpected, examplesInversions  []string
	examplesDLQDup, examplesDLQUnexpected   []string
	// brokenDeadLettered counts succeeding events a break of the table
	// left dead-lettered and unapplied; brokenWorkflows the retry
	// workflows of succeeding events started within a break (s.breaks).
	brokenDeadLettered, brokenWorkflows int
	// dlqRepeated counts the repeats of dead-letter-all records.
	dlqRepeated int
	// lostDeadLetters are the DLQ records of examplesLost, when a break
	// (s.breaks) had the DLQ read.
	lostDeadLetters []string
	// The operator's replay (s.replay): events it applied, events it
	// refused (their entity had applied a later one), events it left
	// neither applied nor refused (counted lost too), and the dead letters
	// and retry runs it wrote or started.
	replayApplied, replayRefused, replayUnresolved int
	replayDeadLetters, replayWorkflows             int
	examplesReplay                                 []string
}

// verify checks effects, ledger, workflows and DLQ against the events.
// checkWF/checkDLQ turn off the workflow/DLQ parts.
//
// Workflows are counted by ID among the ProjectionRetryWorkflow runs of the
// task queue: a failing event must have exactly one, and an event that
// succeeds none. With entity ordering the events behind a failing head are
// parked and released by the bridge, so an event of a blocked entity that
// had a workflow of its own is counted apart (workflowsBehind): it is the
// cost entity order must not have.
//
// When the stack's table was broken (s.breaks), a succeeding event may
// instead be dead-lettered with the break's error and never applied, and
// may have a retry workflow started within a break: see tableBreaks.
func (s *stack) verify(events []evt, checkWF, checkDLQ bool) verdict {
	s.t.Helper()
	v := verdict{ordering: s.ordering}
	v.produced = len(events)
	app := s.appliedIn(relProjection)
	var dead []dlqEntry
	if checkDLQ || s.breaks.count() > 0 || s.lostAttempts {
		dead = s.readDLQ()
	}
	// brokenDL: succeeding events whose dead letter is the break's, unapplied.
	brokenDL := map[string]bool{}
	// heldDL: events the operator's dead-letter-all of a break's incident
	// dead-lettered; such a record has no retry workflow (CONTRACT §12).
	heldDL := map[string]bool{}
	if s.breaks.count() > 0 || s.lostAttempts {
		for _, d := range dead {
			if s.breaks.byDeadLetterAll(d.rec.Error) {
				heldDL[d.eventID] = true
			}
			// A replayed event may have been applied by the replay: the
			// operator's, or a rollout's (which replays a dead letter of
			// an event its check found on its schedule, RELIABILITY.md W10).
			unapplied := app[d.eventID] == 0 || (s.replay.has(d.eventID) && !s.replay.appliedBefore[d.eventID]) ||
				(app[d.eventID] == 1 && s.appliedByLaterReplay(d.eventID, d.rec.ReplayCount))
			if (isBreakError(d.rec.Error) || s.breaks.byDeadLetterAll(d.rec.Error) || (s.lostAttempts && isLostAttemptError(d.rec.Error))) && unapplied {
				brokenDL[d.eventID] = true
			}
		}
	}
	refused := map[string]bool{}
	for _, d := range dead {
		if s.replay.has(d.eventID) && s.replay.after(d.rec.DeadLetteredAt) && refusedByReplay(d.rec.ErrorKind, d.rec.Error) {
			refused[d.eventID] = true
		}
	}
	failing := map[string]bool{}
	firstFailure := map[string]int64{} // entity -> sequence of its first failing event
	byWF := map[string]evt{}           // retry workflow ID -> its event
	for _, e := range events {
		byWF[wfID(e.id)] = e
		if e.fails {
			if f, ok := firstFailure[e.entity]; !ok || e.seq < f {
				firstFailure[e.entity] = e.seq
			}
		}
	}
	for _, e := range events {
		if e.fails {
			v.failing++
			failing[e.id] = true
			if app[e.id] > 0 {
				v.appliedFailing++
			}
			continue
		}
		v.succeeded++
		switch n := app[e.id]; {
		case n > 0 && refused[e.id]:
			v.replayUnresolved++
			v.examplesReplay = append(v.examplesReplay, e.id+": applied and refused")
			v.doubleApplied++ // two outcomes of one event
			if len(v.examplesDouble) < 5 {
				v.examplesDouble = append(v.examplesDouble, e.id+" (replayed: applied and refused)")
			}
		case n == 0 && brokenDL[e.id] && s.replay.has(e.id) && !refused[e.id]:
			v.replayUnresolved++
			v.examplesReplay = append(v.examplesReplay, e.id+": neither applied nor refused")
			v.lost++
			if len(v.examplesLost) < 5 {
				v.examplesLost = append(v.examplesLost, e.id+" (replayed: neither applied nor refused)")
			}
		case n == 0 && brokenDL[e.id]:
			v.brokenDeadLettered++
			if s.replay.has(e.id) {
				v.replayRefused++
			}
		case n == 1 && brokenDL[e.id] && s.replay.has(e.id):
			v.replayApplied++
		case n == 0:
			v.lost++
			if len(v.examplesLost) < 5 {
				v.examplesLost = append(v.examplesLost, e.id)
				for _, d := range dead {
					if d.eventID == e.id {
						v.lostDeadLetters = append(v.lostDeadLetters, fmt.Sprintf("%s: %s after %d attempts (%s)", e.id, d.rec.ErrorKind, len(d.rec.Attempts), oneLine(d.rec.Error)))
					}
				}
			}
		case n > 1:
			v.doubleApplied += n - 1
			if len(v.examplesDouble) < 5 {
				v.examplesDouble = append(v.examplesDouble, e.id)
			}
		}
	}
	v.ledger = s.countSQL(`SELECT count(*) FROM causet_projection_applied WHERE projection = $1`, relProjection)
	for id := range s.aside {
		if app[id] > 0 {
			v.ledger-- // the scenario counts the events it set aside
		}
	}
	v.inversions = s.countSQL(`SELECT coalesce(sum(inversions), 0)::int FROM rel_order`)
	if v.inversions > 0 {
		rows, err := s.pool.Query(s.ctx, `SELECT entity_id || ':' || inversions FROM rel_order WHERE inversions > 0 ORDER BY inversions DESC LIMIT 5`)
		require.NoError(s.t, err)
		for rows.Next() {
			var x string
			require.NoError(s.t, rows.Scan(&x))
			v.examplesInversions = append(v.examplesInversions, x)
		}
		rows.Close()
	}
	if checkWF {
		runs := map[string]int{}
		started := map[string]time.Time{} // the first run's start
		replayRuns := map[string]int{}
		asideWF := map[string]bool{}
		for id := range s.aside {
			asideWF[wfID(id)] = true
		}
		for _, e := range s.workflowsOnQueue(contract.RetryWorkflowName) {
			if asideWF[e.ID] {
				continue
			}
			if ev, ok := byWF[e.ID]; ok && s.replay.has(ev.id) && s.replay.after(e.Start) {
				// A run the replay started (a dead-letter-all record has
				// none to signal).
				replayRuns[e.ID]++
				continue
			}
			runs[e.ID]++
			if t, ok := started[e.ID]; !ok || e.Start.Before(t) {
				started[e.ID] = e.Start
			}
		}
		v.workflows = len(runs)
		for _, n := range runs {
			if n > 1 {
				v.dupWorkflows += n - 1
			}
		}
		for _, n := range replayRuns {
			v.replayWorkflows += n
			if n > 1 {
				v.dupWorkflows += n - 1
			}
		}
		for id := range failing {
			if runs[wfID(id)] == 0 && !heldDL[id] {
				v.missingWF++
			}
		}
		for id := range runs {
			e, known := byWF[id]
			switch {
			case known && e.fails:
			case known && s.breaks.covers(started[id]):
				v.brokenWorkflows++
			case known && entityFailed(firstFailure, e):
				v.workflowsBehind++
				if len(v.examplesUnexpected) < 5 {
					v.examplesUnexpected = append(v.examplesUnexpected, id)
				}
			default:
				v.unexpectedWF++
				if len(v.examplesUnexpected) < 5 {
					v.examplesUnexpected = append(v.examplesUnexpected, id)
				}
			}
		}
	}
	if checkDLQ {
		counts := map[string]int{}
		where := map[string][]string{}
		why := map[string][]string{}
		repeated := map[string]int{}
		replayed := map[string]int{}
		for _, d := range dead {
			if s.aside[d.eventID] {
				continue
			}
			if (s.replay.has(d.eventID) && s.replay.after(d.rec.DeadLetteredAt)) || (d.rec.ReplayCount > 0 && refusedByReplay(d.rec.ErrorKind, d.rec.Error)) {
				// The replay's own (the operator's, or a rollout's): one at
				// most (a refusal, or a failing event failing again).
				v.replayDeadLetters++
				if replayed[d.eventID]++; replayed[d.eventID] > 1 {
					v.dlqDup++
					if len(v.examplesDLQDup) < 5 {
						v.examplesDLQDup = append(v.examplesDLQDup, d.eventID+": replayed, dead-lettered again more than once")
					}
				}
				continue
			}
			if s.breaks.byDeadLetterAll(d.rec.Error) {
				repeated[d.eventID]++
				if repeated[d.eventID] > 1 {
					v.dlqRepeated++ // a dead-letter-all record may repeat (CONTRACT §12)
					continue
				}
			}
			counts[d.eventID]++
			run := ""
			if d.rec.Workflow != nil {
				run = d.rec.Workflow.RunID
			}
			where[d.eventID] = append(where[d.eventID], fmt.Sprintf("p%d@%d (run %s, replay %d, dead-lettered %s)",
				d.partition, d.offset, run, d.rec.ReplayCount, d.rec.DeadLetteredAt.Format("15:04:05.000")))
			why[d.eventID] = append(why[d.eventID], fmt.Sprintf("%s after %d attempts, run %s: %s", d.rec.ErrorKind, len(d.rec.Attempts), run, oneLine(d.rec.Error)))
		}
		for id, n := range counts {
			v.dlq += n
			if n > 1 {
				v.dlqDup += n - 1
				if len(v.examplesDLQDup) < 5 {
					v.examplesDLQDup = append(v.examplesDLQDup, id+": "+strings.Join(where[id], ", "))
				}
			}
			if !failing[id] && !brokenDL[id] {
				v.dlqUnexpect += n
				if len(v.examplesDLQUnexpected) < 5 {
					v.examplesDLQUnexpected = append(v.examplesDLQUnexpected, fmt.Sprintf("%s (applied %d): %s", id, app[id], strings.Join(why[id], "; ")))
				}
			}
		}
		for id := range failing {
			if s.replay.has(id) && replayed[id] == 0 {
				// A failing event replayed fails again: its replay must
				// dead-letter it again.
				v.replayUnresolved++
				v.examplesReplay = append(v.examplesReplay, id+": a failing event replayed and not dead-lettered again")
			}
			if counts[id] == 0 {
				v.dlqMissing++
				if len(v.exDLQMiss) < 5 {
					v.exDLQMiss = append(v.exDLQMiss, id)
				}
			}
		}
	}
	return v
}

// appliedByLaterReplay reports whether the run of eventID applied it on a
// replay after the one whose dead letter says replayCount.
func (s *stack) appliedByLaterReplay(eventID string, replayCount int) bool {
	st, err := s.status(wfID(eventID))
	return err == nil && st.State == contract.StateSucceeded && st.ReplayCount > replayCount
}

func entityFailed(firstFailure map[string]int64, e evt) bool {
	_, ok := firstFailure[e.entity]
	return ok
}

func hasFailedBefore(firstFailure map[string]int64, e evt) bool {
	f, ok := firstFailure[e.entity]
	return ok && f < e.seq
}

// report puts the verdict into the result and asserts it.
func (r *result) verdict(v verdict, checkWF, checkDLQ bool) {
	t := r.t
	r.lost = v.lost
	r.double = v.doubleApplied
	r.dupWF = v.dupWorkflows
	r.fig("events", v.produced)
	r.fig("succeeding", v.succeeded)
	r.fig("failing", v.failing)
	r.fig("ledger_rows", v.ledger)
	r.fig("failing_applied", v.appliedFailing)
	r.fig("order_inversions", v.inversions)
	if v.brokenDeadLettered+v.brokenWorkflows+v.replayApplied > 0 {
		r.fig("dead_lettered_by_break", v.brokenDeadLettered)
		r.fig("workflows_of_break", v.brokenWorkflows)
		r.fig("dead_letter_all_repeats", v.dlqRepeated)
		r.fig("replay_applied", v.replayApplied)
		r.fig("replay_refused", v.replayRefused)
		r.fig("replay_unresolved", v.replayUnresolved)
		r.fig("replay_dead_letters", v.replayDeadLetters)
		r.fig("replay_workflows", v.replayWorkflows)
	}
	if checkWF {
		r.fig("workflows", v.workflows)
		r.fig("missing_workflows", v.missingWF)
		r.fig("unexpected_workflows", v.unexpectedWF)
		r.fig("workflows_behind_failures", v.workflowsBehind)
	}
	if checkDLQ {
		r.fig("dlq_records", v.dlq)
		r.fig("dlq_duplicates", v.dlqDup)
		r.fig("dlq_missing", v.dlqMissing)
		r.fig("dlq_unexpected", v.dlqUnexpect)
	}
	require.Zero(t, v.replayUnresolved, "replayed dead letters without an end, e.g. %v", v.examplesReplay[:min(len(v.examplesReplay), 5)])
	require.Zero(t, v.lost, "lost events, e.g. %v (their dead letters: %v)", v.examplesLost, v.lostDeadLetters)
	require.Zero(t, v.doubleApplied, "double-applied events, e.g. %v", v.examplesDouble)
	require.Zero(t, v.appliedFailing, "failing events have no effect")
	require.Equal(t, v.succeeded-v.brokenDeadLettered, v.ledger, "one ledger row per applied event")
	if v.ordering == orderingEntity {
		require.Zero(t, v.inversions, "an entity's events applied out of sequence order (entity:inversions) %v", v.examplesInversions)
	}
	if checkWF {
		require.Zero(t, v.dupWorkflows, "duplicate workflow runs")
		require.Zero(t, v.missingWF, "failing events without a workflow")
		require.Zero(t, v.unexpectedWF, "workflows for events that did not fail, e.g. %v", v.examplesUnexpected)
		require.Zero(t, v.workflowsBehind, "workflows for succeeding events behind a failure of their entity, e.g. %v", v.examplesUnexpected)
	}
	if checkDLQ {
		require.Zero(t, v.dlqDup, "DLQ records twice: %v", v.examplesDLQDup)
		require.Zero(t, v.dlqMissing, "failing events missing from the DLQ, e.g. %v", v.exDLQMiss)
		require.Zero(t, v.dlqUnexpect, "DLQ records of events that should not be there, e.g. %v", v.examplesDLQUnexpected)
	}
}
