package reliability

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// Scenario 14: a systemic failure. A migration renames a column rel_effects
// writes, so every event fails for it the same way (SQLSTATE 42703) while a
// second projection on the same events keeps applying. Under
// CAUSET_INCIDENT_POLICY=hold one incident opens, the failing events are
// parked in PostgreSQL instead of becoming retry workflows and dead letters,
// the bridge and the worker are killed with SIGKILL during the hold, and
// once the column is back the incident's probe releases every parked event
// once, in entity order. The "dead-letter" subtest runs the same stream
// under the default policy for the per-event cost the hold saves.

// otherProjection is rel_effects' copy over the same events, on its own
// table (with its own order trigger): the migration does not touch it, so
// its rows must stay exact throughout.
const otherProjection = "rel_other"

var (
	otherIR  = strings.ReplaceAll(relIR, relProjection, otherProjection)
	otherDDL = strings.NewReplacer("rel_order", "rel_other_order", relProjection, otherProjection).Replace(relDDL)
)

// brokenColumn is the column of rel_effects the migration renames: the IR
// writes it for every REL_EVENT, and no value appears in the error, so every
// event fails with one fingerprint.
const brokenColumn = "ratio"

func TestReliability14IncidentHold(t *testing.T) {
	p := gate(t)
	t.Run("hold", func(t *testing.T) { incidentScenario(t, p, config.IncidentHold, false) })
	t.Run("dead-letter", func(t *testing.T) { incidentScenario(t, p, config.IncidentDeadLetter, false) })
	t.Run("hold-postgres-outage-at-resolution", func(t *testing.T) {
		testenv.NeedStoppablePostgres(t)
		incidentScenario(t, p, config.IncidentHold, true)
	})
}

// incidentStream is n events over n/5 entities: event i is of entity i%(n/5)
// with sequence i, so each entity has five events in increasing sequence and
// the first fifth of the stream is every entity's first event.
func (s *stack) incidentStream(n int) []evt {
	ents := max(n/5, 1)
	evs := make([]evt, n)
	for i := range evs {
		ent := i % ents
		evs[i] = evt{id: fmt.Sprintf("%s-%d", s.prefix, i), entity: fmt.Sprintf("ent-%d", ent), seq: int64(i),
			partition: int32(ent) % s.partitions}
	}
	return evs
}

// produceAll produces evs at full speed, in batches of 250, in a goroutine;
// the channel closes when all are produced.
func (s *stack) produceAll(evs []evt, into *eventLog) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for from := 0; from < len(evs); from += 250 {
			s.produce(evs[from:min(from+250, len(evs))], into)
		}
	}()
	return done
}

// produceOver produces evs in batches of 50 spread over about d.
func (s *stack) produceOver(evs []evt, d time.Duration, into *eventLog) <-chan struct{} {
	done := make(chan struct{})
	const batch = 50
	gap := d / time.Duration(max((len(evs)+batch-1)/batch, 1))
	go func() {
		defer close(done)
		for from := 0; from < len(evs); from += batch {
			s.produce(evs[from:min(from+batch, len(evs))], into)
			time.Sleep(gap)
		}
	}()
	return done
}

// parkedIDs lists the event IDs in causet_parked_events, with their count
// (an event parked twice for one projection would repeat).
func (s *stack) parkedIDs() ([]string, int) {
	s.t.Helper()
	rows, err := s.pool.Query(s.ctx, `SELECT event_id FROM causet_parked_events WHERE topic = $1 AND projection = $2`, s.topic, relProjection)
	require.NoError(s.t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(s.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(s.t, rows.Err())
	other := s.countSQL(`SELECT count(*)::int FROM causet_parked_events WHERE topic = $1 AND projection <> $2`, s.topic, relProjection)
	return ids, other
}

// parkedCount counts the topic's parked events (-1 while the table does
// not exist yet or the database does not answer).
func (s *stack) parkedCount() int {
	if s.tryCount(`SELECT count(*) FROM pg_class WHERE relname = 'causet_parked_events'`) != 1 {
		return -1
	}
	return s.tryCount(fmt.Sprintf(`SELECT count(*) FROM causet_parked_events WHERE topic = '%s'`, s.topic))
}

// incidentRuns lists the incident workflow runs of the stack's queue.
func (s *stack) incidentRuns() (ids map[string]int, runs int) {
	ids = map[string]int{}
	for _, e := range s.workflowsOnQueue(contract.IncidentWorkflowName) {
		ids[e.ID]++
		runs++
	}
	return ids, runs
}

// waitIncidentHolding waits until the stack's queue has one incident run
// and it holds, and returns its ID.
func (s *stack) waitIncidentHolding(within time.Duration) string {
	s.t.Helper()
	var incidentID string
	require.Eventually(s.t, func() bool {
		ids, _ := s.incidentRuns()
		for id := range ids {
			incidentID = id
		}
		st, err := s.incidentStatus(incidentID)
		return len(ids) == 1 && err == nil && st.State == contract.IncidentHolding
	}, within, 200*time.Millisecond, "no holding incident: %s", s.progressLater())
	return incidentID
}

func (s *stack) incidentStatus(id string) (contract.IncidentStatus, error) {
	var st contract.IncidentStatus
	err := s.temporal.QueryWorkflow(id, contract.QueryStatus, &st)
	return st, err
}

func per10k(n, of int) string {
	if of == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(n)*10000/float64(of))
}

// incidentScenario runs scenario 14 under policy; with outage, PostgreSQL
// stops for 16 s as the incident is resolved (an operator's resolve, sent
// while it is down): the incident's moves of its row wait for it, and the
// incident still ends with every event applied once, in order.
func incidentScenario(t *testing.T, p profile, policy config.IncidentPolicy, outage bool) {
	hold := policy == config.IncidentHold
	name := "incident_hold/entity"
	if outage {
		name = "incident_hold_postgres_outage/entity"
	}
	n := pick(p, 5000, 20000)
	if !hold {
		// Under dead-letter every failing event is a retry workflow, and each
		// entity blocked by its first failure parks its later events behind
		// that head: 300 entities (400 in full) blocked at once. The per-10k
		// figures do not depend on size.
		name = "incident_hold/dead-letter"
		n = pick(p, 1500, 2000)
	}
	r := newResult(t, name)
	threshold := config.DefaultIncidentThreshold
	s := newStack(t, stackOptions{partitions: 6})
	_, err := s.pool.Exec(s.ctx, otherDDL)
	require.NoError(t, err)
	doc, err := projection.Parse([]byte(otherIR))
	require.NoError(t, err)
	_, err = projection.Deploy(s.ctx, s.pool, doc)
	require.NoError(t, err)
	s.env = map[string]string{"CAUSET_INCIDENT_POLICY": string(policy)}
	for k, v := range shortSchedule {
		s.env[k] = v
	}

	w := s.worker(nil)
	b := s.bridge(nil)
	bridges := []*proc{b}
	evs := s.incidentStream(n)
	r.fig("policy", policy)
	r.fig("events", n)
	r.fig("entities", max(n/5, 1))
	var events eventLog
	cut := n
	if hold {
		cut = 3 * n / 5 // the rest is produced during the kills
	}
	// Every entity's first event applies before the migration; it lands
	// while the rest of the stream is being produced and applied.
	start := time.Now()
	<-s.produceAll(evs[:n/5], &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) >= n/5 }, 2*time.Minute, 20*time.Millisecond,
		"rel_effects never reached a fifth of the stream: %s", s.progressLater())
	produced := s.produceAll(evs[n/5:cut], &events)
	_, err = s.pool.Exec(s.ctx, `ALTER TABLE rel_effects RENAME COLUMN `+brokenColumn+` TO `+brokenColumn+`_moved`)
	require.NoError(t, err)
	migratedAt := time.Now()
	before := s.countSQL(`SELECT count(*)::int FROM rel_effects`)
	failing := n - before
	r.fig("applied_before_migration", before)
	r.fig("failing", failing)
	t.Logf("migration after %s: %d applied, %d produced", migratedAt.Sub(start).Round(time.Millisecond), before, events.len())

	// One incident opens.
	var incidentID string
	var st contract.IncidentStatus
	wantState := contract.IncidentOpen
	if hold {
		wantState = contract.IncidentHolding
	}
	require.Eventually(t, func() bool {
		if hold && s.parkedCount() <= 0 {
			return false
		}
		ids, _ := s.incidentRuns()
		if len(ids) != 1 {
			return false
		}
		for id := range ids {
			incidentID = id
		}
		var err error
		st, err = s.incidentStatus(incidentID)
		return err == nil && st.State == wantState
	}, 2*time.Minute, 100*time.Millisecond, "no %s incident; bridge log:\n%s", wantState, b.logTail(20))
	r.fig("incident_opened_after_s", time.Since(migratedAt).Round(100*time.Millisecond).Seconds())
	require.Equal(t, "42703", st.SQLState, "the incident is the missing column: %+v", st)
	require.Contains(t, st.Pattern, `column "`+brokenColumn+`"`)
	require.Equal(t, relProjection, st.Projection)
	if hold {
		require.Equal(t, string(contract.IncidentHolding), s.incidentRowState(incidentID))
	}

	if hold {
		// SIGKILL the bridge (restarted at once) and the worker (restarted
		// 5 s later) while the incident holds and events are still produced.
		produced2 := s.produceOver(evs[cut:], 12*time.Second, &events)
		time.Sleep(time.Second)
		r.fig("parked_at_bridge_kill", s.parkedCount())
		b.kill()
		b = s.bridge(nil)
		bridges = append(bridges, b)
		w.kill()
		time.Sleep(5 * time.Second)
		w = s.worker(nil)
		select {
		case <-produced2:
			r.fig("kills_while_producing", false)
		default:
			r.fig("kills_while_producing", true)
		}
		<-produced2
	}
	<-produced
	require.Equal(t, n, events.len())

	// Offsets never wait for the fix: every record is applied, parked or
	// handed to a retry workflow, and committed.
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end during the incident: %s\n%s", s.progress(), b.logTail(30))
	r.fig("committed_to_end_before_fix_s", time.Since(migratedAt).Round(100*time.Millisecond).Seconds())
	other := s.appliedIn(otherProjection)
	otherExact := 0
	for _, e := range evs {
		if other[e.id] == 1 {
			otherExact++
		}
	}
	r.fig("other_exact_during_incident", fmt.Sprintf("%d/%d", otherExact, n))
	require.Equal(t, n, otherExact, "the other projection applies every event once while rel_effects fails")
	require.Len(t, other, n)
	during := s.countSQL(`SELECT count(*)::int FROM rel_effects`)
	r.fig("rel_effects_rows_during_incident", during)
	require.Equal(t, before, during, "nothing of rel_effects applies while its column is missing")

	var parkedAtFix []string
	behindIncident := 0 // of parkedAtFix, those behind the incident (not behind a retry head that joined it)
	if hold {
		// Every event is applied (before the migration), parked, or the event
		// of a retry workflow (the threshold's heads, and parked events that
		// failed again on their own once released): none is anywhere twice,
		// none nowhere.
		var otherParked int
		parkedAtFix, otherParked = s.parkedIDs()
		behindIncident = s.countSQL(`SELECT count(*)::int FROM causet_parked_events p JOIN causet_blocked_keys b
USING (topic, partition, projection, fork_id, entity_id) WHERE p.topic = $1 AND b.head_workflow_id = $2`, s.topic, incidentID)
		require.Zero(t, otherParked, "the other projection parks nothing")
		applied := s.appliedIn(relProjection)
		retried := map[string]bool{}
		for _, e := range s.workflowsOnQueue(contract.RetryWorkflowName) {
			retried[e.ID] = true
		}
		parked := map[string]int{}
		for _, id := range parkedAtFix {
			parked[id]++
		}
		nowhere, twice := 0, 0
		for _, e := range evs {
			places := parked[e.id]
			if applied[e.id] > 0 {
				places++
			}
			if retried[wfID(e.id)] {
				places++
			}
			switch {
			case places == 0:
				nowhere++
			case places > 1:
				twice++
			}
		}
		r.fig("parked_at_fix", len(parkedAtFix))
		r.fig("unaccounted_during_hold", nowhere)
		r.fig("in_two_places_during_hold", twice)
		require.Zero(t, nowhere, "events neither applied, parked nor in a retry workflow during the hold")
		require.Zero(t, twice, "events parked twice, or parked and applied or retried")
		st, err = s.incidentStatus(incidentID)
		require.NoError(t, err)
		require.Equal(t, contract.IncidentHolding, st.State)
		r.fig("status_events_held", st.EventsHeld)
		r.fig("status_events_affected", st.EventsAffected)
		r.fig("status_probes_before_fix", st.Probes)
	} else {
		// Every failing event runs its own schedule to the DLQ.
		got := s.waitDLQCount(int64(failing), 5*time.Minute)
		r.fig("dead_lettered_after_migration_s", time.Since(migratedAt).Round(time.Second).Seconds())
		require.EqualValues(t, failing, got, "one DLQ record per failing event under policy dead-letter: %s", s.progress())
	}

	// The fix: the column is back.
	_, err = s.pool.Exec(s.ctx, `ALTER TABLE rel_effects RENAME COLUMN `+brokenColumn+`_moved TO `+brokenColumn)
	require.NoError(t, err)
	fixedAt := time.Now()
	resolvedBy := "probe"
	if outage {
		// PostgreSQL goes as the incident is resolved: the row's move to
		// releasing, and the release itself, wait for it.
		testenv.StopPostgres(t)
		resolvedBy = "reliability@outage"
		require.NoError(t, s.temporal.Client.SignalWorkflow(s.ctx, incidentID, "", contract.SignalResolve,
			contract.OperatorSignal{Identity: resolvedBy, Reason: "fixed during an outage"}))
		time.Sleep(16 * time.Second)
		testenv.StartPostgres(t)
		r.fig("postgres_down_at_resolution_s", time.Since(fixedAt).Round(100*time.Millisecond).Seconds())
	}
	caughtUp := func() bool {
		if hold && s.parkedCount() != 0 {
			return false
		}
		dl := int64(0)
		for _, e := range s.endOffsets(s.dlqTopic) {
			dl += e
		}
		return s.tryCount(`SELECT count(*) FROM rel_effects`)+int(dl) >= n
	}
	require.Eventually(t, caughtUp, 5*time.Minute, 100*time.Millisecond,
		"not caught up after the fix: %d parked; %s\n%s", s.parkedCount(), s.progressLater(), b.logTail(30))
	r.fig("fix_to_caught_up_s", time.Since(fixedAt).Round(100*time.Millisecond).Seconds())

	// The incident resolves by its probe and completes.
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	var final contract.IncidentStatus
	require.NoError(t, s.temporal.Client.GetWorkflow(ctx, incidentID, "").Get(ctx, &final), "incident workflow did not complete")
	require.Equal(t, contract.IncidentResolved, final.State)
	if outage {
		// A probe that ran between the fix and the stop resolves it first.
		require.Contains(t, []string{resolvedBy, "probe"}, final.ResolvedBy)
	} else {
		require.Equal(t, resolvedBy, final.ResolvedBy)
	}
	require.NotNil(t, final.ResolvedAt)
	r.fig("incident_resolved_after_fix_s", final.ResolvedAt.Sub(fixedAt).Round(100*time.Millisecond).Seconds())
	r.fig("incident_probes", final.Probes)
	r.fig("incident_events_affected", final.EventsAffected)
	r.fig("incident_events_held", final.EventsHeld)
	if hold {
		require.NotNil(t, final.CaughtUpAt, "a resolved hold records when its last parked event was released")
		r.fig("incident_caught_up_after_fix_s", final.CaughtUpAt.Sub(fixedAt).Round(100*time.Millisecond).Seconds())
		require.Equal(t, string(contract.IncidentResolved), s.incidentRowState(incidentID))
	}

	require.True(t, s.waitCommittedToEnd(time.Minute), "offsets not committed to the end: %s", s.progress())
	unblocked := false
	for deadline := time.Now().Add(2 * time.Minute); !unblocked && time.Now().Before(deadline); time.Sleep(time.Second) {
		unblocked = s.blockedKeys() == 0
	}
	r.fig("keys_unblocked", unblocked)
	time.Sleep(2 * time.Second) // a late duplicate would show up now
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))

	s.incidentVerdict(r, evs, failing, threshold, hold, parkedAtFix, behindIncident, bridges, b)
	require.True(t, unblocked, "keys stay blocked after the incident released them: %d", s.blockedKeys())
}

// incidentRowState is the incident's causet_incidents state ("" without a row).
func (s *stack) incidentRowState(id string) string {
	var st string
	_ = s.pool.QueryRow(s.ctx, `SELECT state FROM causet_incidents WHERE id = $1`, id).Scan(&st)
	return st
}

// incidentVerdict counts effects, ledgers, workflows and dead letters of
// both projections, reports them and asserts them.
func (s *stack) incidentVerdict(r *result, evs []evt, failing, threshold int, hold bool, parkedAtFix []string, behindIncident int, bridges []*proc, b *proc) {
	t := s.t
	applied := s.appliedIn(relProjection)
	other := s.appliedIn(otherProjection)
	dlqCount := map[string]int{}
	dlqRecords := 0
	for _, d := range s.readDLQ() {
		dlqCount[d.eventID]++
		dlqRecords++
	}
	retryRuns := map[string]int{}
	for _, e := range s.workflowsOnQueue(contract.RetryWorkflowName) {
		retryRuns[e.ID]++
	}
	byWF := map[string]evt{}
	for _, e := range evs {
		byWF[wfID(e.id)] = e
	}

	var lost, double, deadAndApplied, dlqDup, dlqWithoutWF, otherLost, otherDouble int
	var exLost, exDouble []string
	for _, e := range evs {
		n, dl := applied[e.id], dlqCount[e.id]
		switch {
		case n == 0 && dl == 0:
			lost++
			if len(exLost) < 5 {
				exLost = append(exLost, e.id)
			}
		case n > 1:
			double += n - 1
			if len(exDouble) < 5 {
				exDouble = append(exDouble, e.id)
			}
		}
		if n > 0 && dl > 0 {
			deadAndApplied++
		}
		if dl > 1 {
			dlqDup += dl - 1
		}
		if dl > 0 && retryRuns[wfID(e.id)] == 0 {
			dlqWithoutWF++
		}
		switch m := other[e.id]; {
		case m == 0:
			otherLost++
		case m > 1:
			otherDouble += m - 1
		}
	}
	dlqUnknown := 0
	known := map[string]bool{}
	for _, e := range evs {
		known[e.id] = true
	}
	for id, c := range dlqCount {
		if !known[id] {
			dlqUnknown += c
		}
	}

	// Retry workflows: the threshold's heads (the first failures, before the
	// incident opened) and failing events parked behind them that became
	// their key's next head; nothing else.
	dupWF, unknownWF := 0, 0
	headEntities := map[string]bool{}
	for id, runs := range retryRuns {
		dupWF += runs - 1
		e, ok := byWF[id]
		if !ok {
			unknownWF++
			continue
		}
		headEntities[e.entity] = true
	}
	incIDs, incRuns := s.incidentRuns()

	ledger := s.countSQL(`SELECT count(*)::int FROM causet_projection_applied WHERE projection = $1`, relProjection)
	otherLedger := s.countSQL(`SELECT count(*)::int FROM causet_projection_applied WHERE projection = $1`, otherProjection)
	appliedRows := 0
	for _, e := range evs {
		if applied[e.id] > 0 {
			appliedRows++
		}
	}
	inversions := s.countSQL(`SELECT coalesce(sum(inversions), 0)::int FROM rel_order`)
	otherInversions := s.countSQL(`SELECT coalesce(sum(inversions), 0)::int FROM rel_other_order`)
	releasedOnce := 0
	for _, id := range parkedAtFix {
		if applied[id] == 1 && dlqCount[id] == 0 {
			releasedOnce++
		}
	}
	opened := 0
	for _, bp := range bridges {
		opened += len(bp.logEvents("projection_incident_opened"))
	}

	r.lost = lost + otherLost
	r.double = double + otherDouble + deadAndApplied
	r.dupWF = dupWF + incRuns - len(incIDs)
	r.fig("ledger_rows", ledger)
	r.fig("applied_rows", appliedRows)
	r.fig("order_inversions", inversions)
	r.fig("other_rows", len(other))
	r.fig("other_ledger_rows", otherLedger)
	r.fig("other_lost", otherLost)
	r.fig("other_double", otherDouble)
	r.fig("other_inversions", otherInversions)
	r.fig("other_exact", otherLost == 0 && otherDouble == 0 && len(other) == len(evs))
	r.fig("incident_workflows", len(incIDs))
	r.fig("incident_runs", incRuns)
	r.fig("incident_opened_log_lines", opened)
	r.fig("retry_workflows", len(retryRuns))
	r.fig("retry_entities", len(headEntities))
	r.fig("unexpected_workflows", unknownWF)
	r.fig("dlq_records", dlqRecords)
	r.fig("dlq_duplicates", dlqDup)
	r.fig("dlq_without_workflow", dlqWithoutWF)
	r.fig("dlq_and_applied", deadAndApplied)
	r.fig("workflows_per_10k_failing", per10k(len(retryRuns), failing))
	r.fig("dlq_per_10k_failing", per10k(dlqRecords, failing))
	if hold {
		r.fig("parked_released_once", fmt.Sprintf("%d/%d", releasedOnce, len(parkedAtFix)))
		r.fig("parked_behind_incident_at_fix", behindIncident)
		r.fig("bridge_released_metric", b.metricWhere("causet_bridge_incident_events_total", `result="released"`))
		r.fig("bridge_parked_metric_after_restart", b.metricWhere("causet_bridge_incident_events_total", `result="parked"`))
	}

	require.Zero(t, lost, "events neither applied nor dead-lettered, e.g. %v", exLost)
	require.Zero(t, double, "double-applied events, e.g. %v", exDouble)
	require.Zero(t, deadAndApplied, "events both applied and dead-lettered")
	require.Equal(t, appliedRows, ledger, "one ledger row per applied event")
	require.Zero(t, inversions, "an entity's events applied out of sequence order")
	require.Zero(t, otherLost, "the other projection lost events")
	require.Zero(t, otherDouble, "the other projection applied events twice")
	require.Equal(t, len(evs), otherLedger)
	require.Zero(t, otherInversions)
	require.Len(t, incIDs, 1, "one incident workflow")
	require.Equal(t, 1, incRuns, "one incident run")
	require.Zero(t, dupWF, "duplicate retry workflow runs")
	require.Zero(t, unknownWF, "retry workflows of events not in the stream (or of the other projection)")
	require.Zero(t, dlqDup, "DLQ records twice")
	require.Zero(t, dlqUnknown, "DLQ records of unknown events")
	require.Zero(t, dlqWithoutWF, "a DLQ record without its retry workflow")
	if hold {
		require.LessOrEqual(t, len(headEntities), threshold-1,
			"retry workflows only for the threshold's heads and their entities' later failures")
		require.Zero(t, dlqRecords, "an incident under hold dead-letters nothing: the threshold's heads joined the hold")
		require.Equal(t, len(parkedAtFix), releasedOnce, "every parked event released once")
		require.EqualValues(t, behindIncident, b.metricWhere("causet_bridge_incident_events_total", `result="released"`),
			"the bridge that released them counted each event parked behind the incident once")
	} else {
		require.Equal(t, failing, len(retryRuns), "policy dead-letter: one retry workflow per failing event")
		require.Equal(t, failing, dlqRecords, "policy dead-letter: one DLQ record per failing event")
	}
}
