package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// The model test of park/release (CONTRACT §14): a seeded, randomized run
// of the real bridge, worker and Temporal dev server on real PostgreSQL,
// checked against what the events say must hold, whatever happened:
//
//   - each event is applied at most once (stats_audit, one row per write);
//   - an entity's applied events are in sequence order;
//   - every event is applied or dead-lettered (a DLQ record): none vanished;
//   - once drained, no key is blocked and nothing is parked.
//
// Each seed draws events on few keys with per-entity sequences, failures
// that clear within the schedule (success at attempt k) or not (a dead
// letter), and faults while they flow: heads terminated from outside,
// dead letters replayed (after their entity moved on: refused) or
// discarded, the bridge killed (its group's offsets lost, so everything is
// read again), a second bridge joining and leaving (a rebalance, fenced),
// a claim landing after the bridge that made it was killed (the live owner
// fenced by a bridge the group no longer knows: it must claim back).
// Even seeds hold failures in incidents (opened, reopened, resolved and
// dead-lettered at random); every third seed rolls the projection out
// while the failures go on (no failing allowed: its check may stop it) and
// reruns it once drained. Every incident and rollout run must end.
//
// CAUSET_MODEL_SEEDS sets how many seeds run (default 10: 1…10), and
// CAUSET_MODEL_SEED runs one seed alone, as a failing run names it.
func TestBridgeKafkaModelSeeds(t *testing.T) {
	var seeds []uint64
	if s := os.Getenv("CAUSET_MODEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "CAUSET_MODEL_SEED")
		seeds = []uint64{n}
	} else {
		count := 10
		if s := os.Getenv("CAUSET_MODEL_SEEDS"); s != "" {
			var err error
			count, err = strconv.Atoi(s)
			require.NoError(t, err, "CAUSET_MODEL_SEEDS")
		}
		for i := range count {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runModelSeed(t, seed)
		})
	}
}

// modelEvent is one event of a model run.
type modelEvent struct {
	artist string
	n      int // its sequence, and its plays_per_day
	id     string
	fails  string // "", "clears" or "stays"
}

// modelRun is what a model run did, for the checker and the failure report.
type modelRun struct {
	mu       sync.Mutex
	timeline []string
	start    time.Time
}

func (m *modelRun) note(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timeline = append(m.timeline, fmt.Sprintf("%6.1fs ", time.Since(m.start).Seconds())+fmt.Sprintf(format, args...))
}

func runModelSeed(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6361757365740001))
	h, o := orderedHarness(t, 2)
	o.Retry = config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.headStaleAfter = 2 * time.Second
	m := &modelRun{start: time.Now()}
	// Even seeds hold a fingerprint's failures in incidents (threshold 2):
	// every failure here fails the same way, so a hold opens, is resolved
	// or dead-lettered, and reopens while the failures go on.
	holds := seed%2 == 0
	if holds {
		// An incident's ID is its projection and fingerprint, one per
		// deployment (its Temporal namespace and database). Seeds share the
		// dev server's namespace, so each fails with an error of its own:
		// otherwise one seed's bridges would signal another's hold.
		own := strings.Map(func(r rune) rune { return 'a' + r - '0' }, strconv.FormatUint(seed, 10))
		_, err := h.pool.Exec(h.ctx, `CREATE OR REPLACE FUNCTION stats_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM fail_ctl f WHERE f.artist_id = NEW.artist_id AND (f.plays IS NULL OR f.plays = NEW.plays)) THEN
    RAISE EXCEPTION 'flagged to fail (model seed `+own+`)';
  END IF;
  RETURN NEW;
END $$`)
		require.NoError(t, err)
		o.Incidents = config.Incidents{Threshold: 2, Window: time.Minute, Policy: config.IncidentHold}
		o.IncidentStore = incident.NewStore(h.pool)
		m.note("incidents hold (threshold 2)")
	}
	// Every third seed rolls the deployed document out at a random point of
	// the stream, and again once drained.
	rollsOut := seed%3 == 0
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (replay it: CAUSET_MODEL_SEED=%d go test -run 'TestBridgeKafkaModelSeeds' ./starter/)\n%s",
				seed, seed, strings.Join(m.timeline, "\n"))
		}
	})

	// The workload: 3-5 keys, 6-12 events each, interleaved.
	var events []modelEvent
	keys := 3 + rng.IntN(3)
	next := map[string]int{}
	var artists []string
	for k := range keys {
		artists = append(artists, fmt.Sprintf("%sm%d", h.prefix, k))
	}
	total := 0
	for range artists {
		total += 6 + rng.IntN(7)
	}
	for range total {
		a := artists[rng.IntN(len(artists))]
		next[a]++
		ev := modelEvent{artist: a, n: next[a]}
		ev.id = nth(h, a, ev.n).EventID
		switch x := rng.Float64(); {
		case x < 0.15:
			ev.fails = "clears"
		case x < 0.22:
			ev.fails = "stays"
		}
		events = append(events, ev)
	}
	partitionOf := func(a string) int32 { return int32(slices.Index(artists, a) % 2) }

	// Each bridge has a registry of its own, as each process has.
	start := func() *running {
		oo := o
		oo.Registerer = prometheus.NewRegistry()
		return h.start(oo)
	}
	// Killed bridges' late claims draw from a generator of their own, so
	// the seeds' other draws stay as they were: one lands at a random step
	// of every seed, more at 2 % of the steps.
	lateRng := rand.New(rand.NewPCG(seed, 0x6361757365740002))
	lateClaimAt := lateRng.IntN(len(events))
	lateClaim := func() {
		id := partitionOf(artists[lateRng.IntN(len(artists))])
		m.note("a killed bridge's claim of partition %d lands", id)
		_, err := parking.Claim(h.ctx, h.pool, o.Group, h.topic, id, "killed-bridge")
		require.NoError(t, err)
	}
	rolloutAt := -1
	if rollsOut {
		rolloutAt = rng.IntN(len(events))
	}
	var during client.WorkflowRun
	r := start()
	var second *running
	var cleared sync.WaitGroup
	for i, ev := range events {
		if ev.fails != "" {
			h.flag(ev.artist, ev.n)
			m.note("%s-%d fails (%s)", ev.artist[len(h.prefix):], ev.n, ev.fails)
			if ev.fails == "clears" {
				// Cleared within the schedule (attempts at +0, +1, +2 s):
				// it applies at attempt 2 or 3, or dead-letters just before.
				after := time.Duration(500+rng.IntN(2500)) * time.Millisecond
				cleared.Add(1)
				time.AfterFunc(after, func() {
					defer cleared.Done()
					_, _ = h.pool.Exec(h.ctx, `DELETE FROM fail_ctl WHERE artist_id = $1 AND plays = $2`, ev.artist, ev.n)
				})
			}
		}
		rec := envRecord(partitionOf(ev.artist), sequenced(nth(h, ev.artist, ev.n), int64(ev.n)))
		h.produce(rec)
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)

		// Faults, at random points of the stream.
		switch x := rng.Float64(); {
		case x < 0.04 && second == nil:
			m.note("bridge killed (offsets lost) and restarted")
			h.crash(r)
			r = start()
		case x < 0.04:
			// The other bridge takes its partitions, then gives some back.
			m.note("bridge stopped while the second runs, and restarted")
			r.stop(t)
			r = start()
		case x < 0.07 && second == nil:
			m.note("a second bridge joins")
			second = start()
		case x < 0.10 && second != nil:
			m.note("the second bridge leaves")
			second.stop(t)
			second = nil
		case x < 0.16:
			if head := modelRetryingHead(h); head != "" {
				m.note("terminate %s", head)
				_ = h.temporal.Client.TerminateWorkflow(h.ctx, head, "", "model: operator terminates")
			}
		case x < 0.24 && holds:
			if ids := h.incidents(); len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				action := contract.SignalResolve
				if rng.IntN(2) == 0 {
					action = contract.SignalDeadLetterAll
				}
				m.note("%s %s", action, id)
				_ = h.temporal.Client.SignalWorkflow(h.ctx, id, "", action, contract.OperatorSignal{Identity: "model", Reason: "seed " + strconv.FormatUint(seed, 10)})
			}
		case x < 0.26 && x >= 0.24:
			// A claim that lands after its bridge was killed (in flight at
			// the kill): the partition's live owner is fenced by a bridge
			// the group no longer knows, and must claim it back.
			lateClaim()
		case x < 0.20:
			if head := modelDeadLetteredRun(h, rng); head != "" {
				action := contract.SignalReplay
				if rng.IntN(2) == 0 {
					action = contract.SignalDiscard
				}
				m.note("%s %s", action, head)
				_ = h.temporal.Client.SignalWorkflow(h.ctx, head, "", action, contract.OperatorSignal{Identity: "model", Reason: "seed " + strconv.FormatUint(seed, 10)})
			}
		}
		if i == lateClaimAt {
			lateClaim()
		}
		if i == rolloutAt {
			var err error
			during, err = modelRollout(h, 0)
			require.NoError(t, err)
			m.note("rollout %s started (no failing allowed)", during.GetID())
		}
	}
	if second != nil {
		second.stop(t)
	}
	cleared.Wait()
	// The failures that stay are lifted now: their heads have dead-lettered
	// or apply at a later attempt; either is an outcome.
	_, err := h.pool.Exec(h.ctx, `DELETE FROM fail_ctl`)
	require.NoError(t, err)
	m.note("all produced; failures lifted")

	if !modelWait(2*time.Minute, func() bool {
		return h.blockedRows() == 0 && h.count(`SELECT count(*) FROM causet_parked_events`) == 0
	}) {
		t.Fatalf("seed %d: keys still blocked: %v\nincidents: %v", seed, modelBlocked(h), modelIncidents(h))
	}
	h.waitCommittedToEnd(time.Minute)
	m.note("drained")
	if holds {
		// Every hold ends: no row holds, releases or dead-letters, and no
		// incident run is left open.
		if !modelWait(time.Minute, func() bool {
			return h.count(`SELECT count(*) FROM causet_incidents WHERE state IN ('holding', 'releasing', 'dead_lettering')`) == 0 &&
				len(h.temporal.ListWorkflows(t, fmt.Sprintf("TaskQueue = %q AND WorkflowType = %q AND ExecutionStatus = 'Running'",
					h.taskQueue, contract.IncidentWorkflowName))) == 0
		}) {
			t.Fatalf("seed %d: an incident never ended: %v", seed, modelIncidents(h))
		}
		m.note("every incident ended")
	}

	rollouts := ""
	if rollsOut {
		rollouts = modelRollouts(t, h, m, seed, during)
	}

	// The checker.
	dead := map[string]int{}
	for _, rec := range h.dlqRecordsNow() {
		var ev struct {
			EventID string `json:"eventId"`
		}
		if rec.Event != nil && json.Unmarshal(*rec.Event, &ev) == nil {
			dead[ev.EventID]++
		}
	}
	for _, a := range artists {
		applied := h.audit(a)
		for i := 1; i < len(applied); i++ {
			require.Greater(t, applied[i], applied[i-1], "seed %d: %s applied %v: out of order or twice", seed, a, applied)
		}
	}
	for _, ev := range events {
		if slices.Contains(h.audit(ev.artist), int64(ev.n)) || dead[ev.id] > 0 {
			continue
		}
		t.Fatalf("seed %d: event %s-%d (fails %q) vanished: not applied, no DLQ record", seed, ev.artist, ev.n, ev.fails)
	}
	t.Logf("seed %d: %d events, %d dead-lettered, %d incident runs%s", seed, len(events), len(dead), len(h.incidents()), rollouts)
}

// modelRetryingHead is the head of a blocked key still retrying, if any.
func modelRetryingHead(h *harness) string {
	var head string
	_ = h.pool.QueryRow(h.ctx, `SELECT head_workflow_id FROM causet_blocked_keys
WHERE topic = $1 AND head_state = 'retrying' AND pending_start IS NULL AND head_workflow_id LIKE 'projection-retry:%' LIMIT 1`, h.topic).Scan(&head)
	return head
}

// modelDeadLetteredRun is a retry run of the test that is dead-lettered and
// open, if any.
func modelDeadLetteredRun(h *harness, rng *rand.Rand) string {
	ids := h.workflowsOnQueue()
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		if st, err := h.status(id); err == nil && st.State == contract.StateDeadLettered {
			return id
		}
	}
	return ""
}

// modelBlocked lists the blocked keys left, for a failure message.
func modelBlocked(h *harness) []string {
	rows, err := h.pool.Query(h.ctx, `SELECT entity_id, head_workflow_id, head_state, parked FROM causet_blocked_keys WHERE topic = $1`, h.topic)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b parking.Blocked
		if rows.Scan(&b.EntityID, &b.Head, &b.State, &b.Parked) == nil {
			out = append(out, fmt.Sprintf("%s behind %s (%s, %d parked)", b.EntityID, b.Head, b.State, b.Parked))
		}
	}
	return out
}

// modelWait polls cond until it holds (true) or d has passed (false).
func modelWait(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// modelIncidents describes each incident row and its workflow, for a
// failure message.
func modelIncidents(h *harness) []string {
	rows, err := h.pool.Query(h.ctx, `SELECT id, state, opened_at, events_affected, events_held FROM causet_incidents ORDER BY id`)
	if err != nil {
		return []string{err.Error()}
	}
	type row struct {
		id, state      string
		opened         time.Time
		affected, held int
	}
	var rs []row
	for rows.Next() {
		var r row
		if rows.Scan(&r.id, &r.state, &r.opened, &r.affected, &r.held) == nil {
			rs = append(rs, r)
		}
	}
	rows.Close()
	var out []string
	for _, r := range rs {
		line := fmt.Sprintf("%s row=%s opened=%s affected=%d held=%d", r.id, r.state, r.opened.Format(time.TimeOnly), r.affected, r.held)
		if d, err := h.describe(r.id); err != nil {
			line += " workflow: " + err.Error()
		} else {
			info := d.GetWorkflowExecutionInfo()
			line += fmt.Sprintf(" workflow=%s run=%s history=%d", info.GetStatus(), info.GetExecution().GetRunId(), info.GetHistoryLength())
			for _, a := range d.GetPendingActivities() {
				line += fmt.Sprintf(" pending=%s(attempt %d, %s)", a.GetActivityType().GetName(), a.GetAttempt(), a.GetLastFailure().GetMessage())
			}
		}
		if v, err := h.temporal.Client.QueryWorkflow(h.ctx, r.id, "", contract.QueryStatus); err == nil {
			var st contract.IncidentStatus
			if v.Get(&st) == nil {
				line += fmt.Sprintf(" status=%s resolvedBy=%q probes=%d lastProbeError=%q", st.State, st.ResolvedBy, st.Probes, st.LastProbeError)
			}
		}
		out = append(out, line)
	}
	return out
}

// modelRollout starts a rollout of the deployed artist_stats document (a
// rerun: it deploys nothing) with the harness's own ID, as the command
// starts it: a stopped or cancelled one of that ID is started again, a
// running or done one found.
func modelRollout(h *harness, maxFailing float64) (client.WorkflowRun, error) {
	deps, err := projection.List(h.ctx, h.pool)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(deps, func(d projection.Deployment) bool { return d.Name == "artist_stats" })
	if i < 0 {
		return nil, fmt.Errorf("artist_stats is not deployed")
	}
	body, err := json.Marshal(deps[i].Document)
	if err != nil {
		return nil, err
	}
	in := contract.RolloutInput{Projection: "artist_stats", Document: body, Version: deps[i].Version, MaxFailing: maxFailing,
		Rate: 50, Limit: 1000, Identity: "model", Reason: "model"}
	return h.temporal.Client.ExecuteWorkflow(h.ctx, client.StartWorkflowOptions{
		ID: "projection-rollout:artist_stats:" + strconv.Itoa(deps[i].Version) + ":" + h.prefix, TaskQueue: h.taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, contract.RolloutWorkflowName, in)
}

// modelRolloutEnd waits up to d for a rollout run to end and returns its
// progress (a stopped one's from its failure) and how it ended.
func modelRolloutEnd(h *harness, run client.WorkflowRun, d time.Duration) (contract.RolloutProgress, error) {
	ctx, cancel := context.WithTimeout(h.ctx, d)
	defer cancel()
	var p contract.RolloutProgress
	err := run.GetWithOptions(ctx, &p, client.WorkflowRunGetOptions{DisableFollowingRuns: false})
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == contract.RolloutStoppedType {
		return p, appErr.Details(&p)
	}
	if temporal.IsCanceledError(err) {
		return contract.RolloutProgress{State: contract.RolloutCancelled}, nil
	}
	return p, err
}

// modelRollouts ends the rollout started during the stream (it may still
// be settling on events an operator discarded or terminated: it is then
// cancelled, as an operator would) and reruns it on the drained stream,
// where it replays the dead letters that apply now; it must end, and the
// stream drain again.
func modelRollouts(t *testing.T, h *harness, m *modelRun, seed uint64, during client.WorkflowRun) (summary string) {
	t.Helper()
	p, err := modelRolloutEnd(h, during, time.Minute)
	if errors.Is(err, context.DeadlineExceeded) {
		m.note("rollout still %s after the drain: cancelled", p.State)
		require.NoError(t, h.temporal.Client.CancelWorkflow(h.ctx, during.GetID(), during.GetRunID()))
		p, err = modelRolloutEnd(h, during, time.Minute)
	}
	require.NoError(t, err, "seed %d: the rollout started during the stream never ended", seed)
	m.note("rollout during the stream ended %s: %d affected, %d failing at the check, %d replayed, %d applied (%s)",
		p.State, p.Affected, p.WouldFail, p.Replayed, p.Applied, p.Reason)
	summary = fmt.Sprintf(", rollouts: %s (%d affected, %d replayed)", p.State, p.Affected, p.Replayed)

	rerun, err := modelRollout(h, 1)
	require.NoError(t, err)
	if rerun.GetRunID() != during.GetRunID() {
		p, err = modelRolloutEnd(h, rerun, 2*time.Minute)
		require.NoError(t, err, "seed %d: the rerun rollout never ended", seed)
		require.Contains(t, []contract.RolloutState{contract.RolloutDone, contract.RolloutStopped}, p.State, "seed %d: %+v", seed, p)
		m.note("rollout rerun once drained ended %s: %d affected, %d replayed, %d applied, %d failing, %d pending",
			p.State, p.Affected, p.Replayed, p.Applied, p.Failing, p.Pending)
		summary += fmt.Sprintf(", rerun %s (%d affected, %d replayed, %d applied)", p.State, p.Affected, p.Replayed, p.Applied)
	} else {
		m.note("rollout rerun found the rollout done")
		summary += ", rerun found it done"
	}
	// Visibility lags the runs' ends by a moment.
	open := fmt.Sprintf("TaskQueue = %q AND WorkflowType = %q AND ExecutionStatus = 'Running'", h.taskQueue, contract.RolloutWorkflowName)
	if !modelWait(30*time.Second, func() bool { return len(h.temporal.ListWorkflows(t, open)) == 0 }) {
		t.Fatalf("seed %d: a rollout run is still open: %v", seed, h.temporal.ListWorkflows(t, open))
	}
	if !modelWait(2*time.Minute, func() bool {
		return h.blockedRows() == 0 && h.count(`SELECT count(*) FROM causet_parked_events`) == 0
	}) {
		t.Fatalf("seed %d: keys blocked after the rollouts: %v", seed, modelBlocked(h))
	}
	m.note("drained after the rollouts")
	return summary
}
