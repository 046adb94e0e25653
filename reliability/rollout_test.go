package reliability

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
)

// fixedRelIR is relIR with its division guarded: the fix of the events
// that failed with "division by zero".
var fixedRelIR = strings.Replace(relIR, "      ratio: event.payload.one / event.payload.d\n",
	"      ratio: \"event.payload.d == 0 ? 0 : event.payload.one / event.payload.d\"\n", 1)

// Scenario 23: a rollout killed mid-way. Every 25th event fails (division
// by zero) and is dead-lettered, its entity's next two events parked
// behind it (CAUSET_DLQ_HOLD_ENTITY=true). `causet projections rollout`
// with the fix checks, deploys and replays at 2/s (batches of 10); the worker running it
// is SIGKILLed mid-replay and restarted 3 s later. The rollout ends once,
// done, and every event is applied exactly once, each entity in order.
func TestReliability23RolloutKill9(t *testing.T) {
	p := gate(t)
	r := newResult(t, "rollout_kill9/entity")
	s := newStack(t, stackOptions{partitions: 3})
	s.env = map[string]string{"CAUSET_DLQ_HOLD_ENTITY": "true"}
	for k, v := range shortSchedule {
		s.env[k] = v
	}
	require.NotEqual(t, relIR, fixedRelIR, "the fix edits the expression")
	w := s.worker(nil)
	b := s.bridge(nil)
	n := pick(p, 1000, 5000)
	m := mix{every: 25, follow: 2}
	var events eventLog
	s.produceRange(0, n, m, &events)
	// Under CAUSET_DLQ_HOLD_ENTITY an entity's first failing event is
	// dead-lettered and every later event of the entity waits behind it:
	// its next two, and at the full size those of later groups that land
	// on the same entity (the stream has 997 entities).
	failing, wantParked := heldBehindDeadLetters(events.all())
	r.fig("events", n)
	r.fig("dead_letters", failing)
	require.EqualValues(t, failing, s.waitDLQCount(int64(failing), 3*time.Minute), "every failing event dead-lettered: %s", s.progress())
	parked := s.countSQL(`SELECT count(*)::int FROM causet_parked_events WHERE topic = $1`, s.topic)
	r.fig("parked_behind_dead_letters", parked)
	require.Equal(t, wantParked, parked, "each dead letter holds its entity's later events")

	file := filepath.Join(s.dir, "rel_effects.fixed.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fixedRelIR), 0o644))
	check, err := s.causetOutput("projections", "check", file)
	require.NoError(t, err)
	t.Logf("check:\n%s", check)
	require.Contains(t, check, fmt.Sprintf("would_apply %d, still_fails 0, out_of_order 0", failing+parked))
	out, err := s.causetOutput("projections", "rollout", file, "--rate", "2", "--no-wait", "--reason", "guard d = 0")
	require.NoError(t, err, out)
	idm := regexp.MustCompile(`rollout (projection-rollout:` + relProjection + `:2:[0-9a-f]{12}) \(run`).FindStringSubmatch(out)
	require.NotNil(t, idm, "the command names the rollout's ID (projection, version, candidate hash):\n%s", out)
	id := idm[1]

	// Kill the worker mid-replay.
	var prog contract.RolloutProgress
	require.Eventually(t, func() bool {
		return s.temporal.QueryWorkflow(id, contract.QueryRolloutProgress, &prog) == nil && prog.Replayed >= 10
	}, 2*time.Minute, 100*time.Millisecond, "the rollout never replayed 10 dead letters: %+v", prog)
	r.fig("replayed_at_kill", prog.Replayed)
	w.kill()
	time.Sleep(3 * time.Second)
	w = s.worker(nil)

	var final contract.RolloutProgress
	require.NoError(t, s.temporal.Client.GetWorkflow(s.ctx, id, "").Get(s.ctx, &final), "worker log:\n%s", w.logTail(30))
	r.fig("rollout_state", final.State)
	r.fig("rollout_affected", final.Affected)
	r.fig("rollout_applied", final.Applied)
	require.Equal(t, contract.RolloutDone, final.State, final.Reason)
	require.Equal(t, failing+parked, final.Affected)
	require.Equal(t, final.Affected, final.WouldApply)
	require.Equal(t, final.Affected, final.Applied)
	require.Zero(t, final.Failing)
	require.Equal(t, failing, final.Replayed, "each dead letter replayed once, the kill notwithstanding")

	// Every event exactly once, each entity in order; one rollout run.
	require.Len(t, events.all(), n)
	s.requireAppliedOnceInOrder(r, events.all())
	runs := 0
	for _, e := range s.workflowsOnQueue(contract.RolloutWorkflowName) {
		if e.ID == id {
			runs++
		}
	}
	require.Equal(t, 1, runs, "one rollout run")
	require.False(t, b.exited())
}

// requireAppliedOnceInOrder checks that every event of evs is applied
// exactly once (counting r.lost and r.double) and each entity's in sequence
// order (rel_order's inversions), within a minute of waiting.
func (s *stack) requireAppliedOnceInOrder(r *result, evs []evt) {
	s.t.Helper()
	s.waitApplied(evs, time.Minute)
	app := s.appliedIn(relProjection)
	once := 0
	for _, e := range evs {
		switch app[e.id] {
		case 0:
			r.lost++
		case 1:
			once++
		default:
			r.double++
		}
	}
	r.fig("applied_once", once)
	require.Equal(s.t, len(evs), once, "every event applied exactly once")
	inversions := s.countSQL(`SELECT coalesce(sum(inversions), 0)::int FROM rel_order`)
	r.fig("inversions", inversions)
	require.Zero(s.t, inversions, "each entity's events in sequence order")
}

// heldBehindDeadLetters counts, for a stream whose failing events are
// dead-lettered under CAUSET_DLQ_HOLD_ENTITY, the dead letters (each
// entity's first failing event) and the events parked behind them (every
// later event of those entities).
func heldBehindDeadLetters(evs []evt) (deadLetters, parked int) {
	byEntity := map[string][]evt{}
	for _, e := range evs {
		byEntity[e.entity] = append(byEntity[e.entity], e)
	}
	for _, es := range byEntity {
		slices.SortFunc(es, func(a, b evt) int { return cmp.Compare(a.seq, b.seq) })
		for i, e := range es {
			if e.fails {
				deadLetters++
				parked += len(es) - i - 1
				break
			}
		}
	}
	return deadLetters, parked
}
