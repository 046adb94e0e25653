package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/testenv"
	causetworker "github.com/causet/projection-retry/worker"
)

// previousRelease builds the causet binary of the previous release
// (scripts/previous-release.sh: the newest one recorded in
// internal/release/releases.tsv that is not this commit, or
// CAUSET_UPGRADE_FROM's version) and returns its path and version.
func previousRelease(t *testing.T) (bin, version string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	args := []string{"scripts/previous-release.sh"}
	if v := os.Getenv("CAUSET_UPGRADE_FROM"); v != "" {
		args = append(args, v)
	}
	cmd := exec.Command("bash", args...)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "building the previous release: %s", stderr.String())
	bin = strings.TrimSpace(string(out))
	return bin, filepath.Base(filepath.Dir(bin)) // .cache/releases/<version>/causet
}

// Scenario 26: a rolling upgrade under load, from the previous release's
// binary to this build, with a held incident, a rollout replaying, and a
// restart and a rollback halfway.
//
// Two bridges and two workers of the previous release run on its schema
// while events flow, until the roll is over (1 % failing, each failure with later events of its key
// parked behind it, on the default schedule: attempts at 0, 1, 3, 7 and
// 15 s), under CAUSET_INCIDENT_POLICY=hold. Beside the stream, 30 events of
// keys of their own fail and are dead-lettered by the old workers. Then
// rel_effects is broken (a column renamed) and one incident holds, and this
// build's `causet migrate up` runs. The processes are replaced one at a
// time as a Deployment rolls them (SIGTERM, then the new one), workers
// first; an old worker killed -9 halfway and restarted on the old binary
// runs on the newer schema (the window). The column comes back (the
// incident's probe releases what it held) and the old release's CLI starts
// a rollout whose candidate fixes the 30 events, replaying them at 0.5 a
// second while one bridge and one worker are rolled back to the old release
// (they run) and forward again.
//
// Afterwards every event is applied once or dead-lettered, in order per
// entity; every failing event's run made its five attempts on the schedule
// (late by at most what a kill -9 costs); the incident resolved and the
// rollout is done, each of the 30 applied once; the histories of the retry,
// incident and rollout runs, the old workers' among them, replay on this
// build's workflow code; and an old process started past a contract step
// exits with one line naming it.
func TestReliability26RollingUpgrade(t *testing.T) {
	p := gate(t)
	t.Parallel()
	r := newResult(t, "rolling_upgrade/entity")
	oldBin, oldVersion := previousRelease(t)
	r.fig("from", oldVersion)
	s := newStack(t, stackOptions{partitions: 6, migrateWith: oldBin})
	// Incidents hold (the default policy dead-letters), and one opens at 200
	// failures of one fingerprint a minute (default 20): the stream's own
	// failures, about 20 a minute, and the 30 aside stay below it, the
	// break's (every event, 33 a second) pass it within seconds.
	s.env = map[string]string{"CAUSET_INCIDENT_POLICY": "hold", "CAUSET_INCIDENT_THRESHOLD": "200"}
	s.breaks = &tableBreaks{}
	s.lostAttempts = true
	oldSchema := s.countSQL(`SELECT max(version_id)::int FROM ` + schema.Table)
	r.fig("schema_from", oldSchema)

	old := func(name string) *proc { return s.startBin(oldBin, nil, name+"-"+oldVersion, nil, name) }
	cur := func(name string) *proc { return s.startBin(s.bin, nil, name+"-new", nil, name) }
	workers := []*proc{old("worker"), old("worker")}
	bridges := []*proc{old("bridge"), old("bridge")}

	require.NotEqual(t, relIR, rollFixIR, "the candidate guards the division")
	// The rollout's events: keys of their own, failing until its candidate.
	var aside eventLog
	var rollEvs []evt
	s.aside = map[string]bool{}
	for k := range 30 {
		e := evt{id: fmt.Sprintf("%s-roll-%d", s.prefix, k), entity: fmt.Sprintf("roll-%d", k), fails: true, partition: int32(k) % s.partitions}
		rollEvs = append(rollEvs, e)
		s.aside[e.id] = true
	}
	s.produce(rollEvs, &aside)

	n := pick(p, 6000, 20000)
	m := mix{every: 100, follow: 3, failsBehind: 10}
	var events eventLog
	// The stream goes on until the roll is over (at most 3n events): the
	// last process rolled has events to apply however long the roll takes.
	rollOver := make(chan struct{})
	produced := s.producePacedUntil(n, pick(p, 180*time.Second, 300*time.Second), m, &events, rollOver, 3*n)
	var endStream sync.Once
	stopStream := func() { endStream.Do(func() { close(rollOver) }) }
	t.Cleanup(func() { stopStream(); <-produced })
	require.Eventually(t, func() bool {
		if s.tryCount(`SELECT count(*) FROM rel_effects`) < n/10 {
			return false
		}
		dead := 0
		for _, d := range s.readDLQ() {
			if s.aside[d.eventID] {
				dead++
			}
		}
		return dead == len(rollEvs)
	}, 2*time.Minute, time.Second, "the old release applies and dead-letters: %s", s.progressLater())

	// A bad migration of the read model: one incident holds.
	require.NoError(t, s.renameColumn(brokenColumn, brokenColumn+"_moved"))
	brokenAt := time.Now()
	incidentID := s.waitIncidentHolding(2 * time.Minute)
	r.fig("incident_holding_after_s", durS(time.Since(brokenAt)))

	// applying waits until bridge b applied an event itself.
	applying := func(b *proc) {
		t.Helper()
		require.Eventually(t, func() bool { return b.exited() || b.metric("causet_bridge_applied_total") > 0 },
			90*time.Second, 200*time.Millisecond, "bridge %s applies: %s", b.name, s.progressLater())
		require.False(t, b.exited(), "%s exited:\n%s", b.name, b.logTail(20))
	}
	// running waits 8 s and checks p is still up.
	running := func(p *proc) {
		t.Helper()
		time.Sleep(8 * time.Second)
		require.False(t, p.exited(), "%s exited:\n%s", p.name, p.logTail(20))
	}
	// rollWorker and rollBridge replace worker or bridge i as a Deployment
	// does (SIGTERM, then the new pod) with one started by start (old or
	// cur), and wait until it runs, or applies.
	rollWorker := func(i int, start func(string) *proc) {
		t.Helper()
		workers[i].stop()
		workers[i] = start("worker")
		running(workers[i])
	}
	rollBridge := func(i int, start func(string) *proc) {
		t.Helper()
		bridges[i].stop()
		bridges[i] = start("bridge")
		applying(bridges[i])
	}
	const withinWindow = "the database schema is newer than this build, within its window"

	cmd := exec.Command(s.bin, "migrate", "up")
	cmd.Env = s.procEnv(nil)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "migrate up: %s", out)
	newSchema := s.countSQL(`SELECT max(version_id)::int FROM ` + schema.Table)
	r.fig("schema_to", newSchema)
	require.EqualValues(t, schema.Latest(), newSchema)
	for _, p := range append(workers, bridges...) {
		require.False(t, p.exited(), "%s exited after the migration:\n%s", p.name, p.logTail(20))
	}

	// Workers first, then bridges (docs/UPGRADES.md); the incident holds.
	firstNew := time.Now()
	rollWorker(0, cur)
	bridges[0].stop()
	bridges[0] = cur("bridge")
	time.Sleep(8 * time.Second) // the stream's events are held: nothing to apply

	// An old worker crashes halfway through the roll and comes back on the
	// old release: the schema past its own is all expand steps, so it runs.
	workers[1].kill()
	workers[1] = old("worker")
	running(workers[1])
	require.Equal(t, 1, workers[1].logCount(withinWindow),
		"the restarted %s says it runs within its window:\n%s", oldVersion, workers[1].logTail(20))
	rollWorker(1, cur)

	// The fix of the read model: the incident's probe releases the hold.
	require.NoError(t, s.renameColumn(brokenColumn+"_moved", brokenColumn))
	fixedAt := time.Now()
	s.breaks.add(brokenAt, fixedAt)
	r.fig("broken_s", durS(fixedAt.Sub(brokenAt)))
	applying(bridges[0])

	// Roll one worker and one bridge back to the old release before the
	// roll finishes; they run; then forward again, and the last old bridge.
	rollWorker(0, old)
	rollBridge(0, old)
	require.Equal(t, 1, bridges[0].logCount(withinWindow),
		"the rolled-back bridge says it runs within its window:\n%s", bridges[0].logTail(20))

	// The old release's CLI starts a rollout fixing the aside events, right
	// after the fix: runs the break started are still on their schedule, and
	// one whose last attempt fails under the old version between the
	// rollout's check and its deploy is replayed by the rollout's count
	// (RELIABILITY.md, W10).
	file := filepath.Join(s.dir, "rel_effects.roll-fix.yaml")
	require.NoError(t, os.WriteFile(file, []byte(rollFixIR), 0o644))
	cmd = exec.Command(oldBin, "projections", "rollout", file, "--rate", "0.5", "--max-failing", "1", "--no-wait",
		"--reason", "the roll- keys divide by zero")
	cmd.Env = s.procEnv(nil)
	out, err = cmd.Output()
	require.NoError(t, err, "%s projections rollout: %s", oldVersion, out)
	idm := rolloutIDLine.FindStringSubmatch(string(out))
	require.NotNil(t, idm, "the rollout's ID:\n%s", out)
	rolloutID := idm[1]
	var prog contract.RolloutProgress
	require.Eventually(t, func() bool {
		return s.temporal.QueryWorkflow(rolloutID, contract.QueryRolloutProgress, &prog) == nil && prog.Replayed > 0
	}, 2*time.Minute, 200*time.Millisecond, "the rollout replays: %+v", prog)

	rollBridge(1, cur)
	rollWorker(0, cur)
	rollBridge(0, cur)
	rolled := time.Now()
	select {
	case <-produced:
		t.Logf("the stream ended (at its bound) before the roll did")
	default:
		r.fig("rolled_while_producing", true)
	}
	stopStream()
	require.NoError(t, s.temporal.QueryWorkflow(rolloutID, contract.QueryRolloutProgress, &prog))
	r.fig("rollout_replayed_during_roll", prog.Replayed)

	<-produced
	r.fig("stream_events", events.len())
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s", s.progress())
	r.fig("drain_after_roll_s", durS(time.Since(rolled)))

	// The incident resolved by its probe, the rollout is done.
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	var incident contract.IncidentStatus
	require.NoError(t, s.temporal.Client.GetWorkflow(ctx, incidentID, "").Get(ctx, &incident), "the incident run ends")
	require.Equal(t, contract.IncidentResolved, incident.State)
	r.fig("incident", fmt.Sprintf("%s_by_%s_held_%d", incident.State, incident.ResolvedBy, incident.EventsHeld))
	var rollout contract.RolloutProgress
	require.NoError(t, s.temporal.Client.GetWorkflow(ctx, rolloutID, "").Get(ctx, &rollout), "the rollout run ends")
	require.Equal(t, contract.RolloutDone, rollout.State, rollout.Reason)
	r.fig("rollout", fmt.Sprintf("%s_replayed_%d_applied_%d_failing_%d_of_%d", rollout.State, rollout.Replayed, rollout.Applied, rollout.Failing, rollout.WouldApply))
	require.GreaterOrEqual(t, rollout.Replayed, len(rollEvs), "every aside dead letter replayed: %+v", rollout)
	// Its settling count ends with nothing pending: what the check said
	// would apply applied, or failed again (the stream's events meet its
	// failures meanwhile); verify below holds each of them to once.
	require.Zero(t, rollout.Pending, "%+v", rollout)
	require.Equal(t, rollout.WouldApply, rollout.Applied+rollout.Failing, "%+v", rollout)
	s.waitApplied(rollEvs, time.Minute)
	for id, k := range s.appliedIn(relProjection) {
		if s.aside[id] {
			require.Equal(t, 1, k, "%s applied once by the rollout", id)
		}
	}

	evs := events.all()
	failing := 0
	for _, e := range evs {
		if e.fails {
			failing++
		}
	}
	s.waitDLQCount(int64(failing+len(rollEvs)), 5*time.Minute)
	require.True(t, s.waitSettled(r, evs, 5*time.Minute), "not settled after the roll: %s", s.progress())

	// The events whose last attempt was lost with a worker killed -9 while
	// a worker of the old release decided its run are dead-lettered. The
	// operator replays the roll's sql dead letters (these, and the break's
	// the rollout did not); each ends applied once or refused (its entity
	// applied a later event).
	lost := 0
	for _, d := range s.readDLQ() {
		if isLostAttemptError(d.rec.Error) && !s.aside[d.eventID] {
			lost++
			testenv.WriteHistory(t, s.ctx, s.temporal.Client, wfID(d.eventID), "", filepath.Join(s.dir, "history-lost-"+d.eventID+".json"))
		}
	}
	r.fig("dead_letters_of_lost_attempts", lost)
	if lost > 0 {
		selected, said := s.replaySQLDeadLetters(r, "replayed after the roll")
		t.Logf("causet dlq replay of %d dead letters: %s", selected, said)
		require.True(t, s.waitSettled(r, evs, 5*time.Minute), "not settled after the replay: %s", s.progress())
	}
	for _, p := range append(workers, bridges...) {
		require.False(t, p.exited(), "%s exited:\n%s", p.name, p.logTail(20))
	}
	v := s.verify(evs, true, true)
	for _, id := range v.examplesLost {
		// For the post-mortem: every run of an event lost (their
		// histories beside the processes' logs).
		id = strings.Fields(id)[0]
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		runs, err := s.temporal.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", wfID(id))})
		cancel()
		require.NoError(t, err, "the runs of %s", id)
		for _, run := range runs.GetExecutions() {
			runID := run.GetExecution().GetRunId()
			testenv.WriteHistory(t, s.ctx, s.temporal.Client, wfID(id), runID,
				filepath.Join(s.dir, fmt.Sprintf("history-%s-%s-%s.json", id, strings.ToLower(run.GetStatus().String()), runID)))
		}
	}
	r.verdict(v, true, true)

	// Every run that failed on its own made attempts 1 to 5 on the
	// schedule: none early (3 s of slack for clocks and the first attempt's
	// own time), none later than 30 s past it (an attempt on a worker killed
	// -9 is tried again after its 10 s heartbeat timeout, and the backoffs
	// after it count from then; a workflow task on it waits out its timeout
	// too). An attempt the server handed to a worker that never ran it (a
	// poll answered as the server was starved, or into a closing
	// connection) is lost the same way. The previous release scheduled its
	// attempts without a heartbeat timeout: one of them lost is tried again
	// after the attempt's whole timeout (ApplyTimeout), so an attempt after
	// it may be as much later (RELIABILITY.md, scenario 26).
	schedule := []float64{0, 1, 3, 7, 15}
	fails := map[string]bool{}
	for _, e := range append(rollEvs, evs...) {
		fails[e.id] = e.fails
	}
	latest, checked, lostAttempts, lostToOldTimeout, metTheBreak := 0.0, 0, 0, 0, 0
	for _, d := range s.readDLQ() {
		if fails[d.eventID] && isBreakError(d.rec.Error) && !s.replay.after(d.rec.DeadLetteredAt) {
			// A failing event whose last attempt met the broken table
			// before its incident held: dead-lettered with the break's
			// error, which verify holds to once.
			metTheBreak++
		}
		if d.rec.ErrorKind != string(contract.KindIREval) || s.replay.after(d.rec.DeadLetteredAt) {
			continue // a lost attempt's (above), the break's, or the replay's
		}
		checked++
		require.NotEmpty(t, d.rec.Attempts, "attempts of %s", d.eventID)
		require.Equal(t, 5, d.rec.Attempts[len(d.rec.Attempts)-1].Number, "the schedule's five attempts of %s", d.eventID)
		slack, lostBefore, previous := 30.0, false, 0
		for _, a := range d.rec.Attempts {
			// An attempt no worker reported starting is recorded lost with
			// no time by this build's workers, and left out by the previous
			// release's (a gap in the numbers).
			if a.Number > previous+1 {
				lostBefore = true
				lostAttempts++
			}
			previous = a.Number
			if a.StartedAt.IsZero() {
				lostBefore = true
				lostAttempts++
				continue
			}
			off := a.StartedAt.Sub(d.rec.Attempts[0].StartedAt).Seconds()
			due := schedule[a.Number-1]
			if off < due-3 {
				testenv.WriteHistory(t, s.ctx, s.temporal.Client, wfID(d.eventID), "", filepath.Join(s.dir, "history-early-"+d.eventID+".json"))
			}
			require.GreaterOrEqual(t, off, due-3, "attempt %d of %s: %.1f s after the first, due at %.0f s", a.Number, d.eventID, off, due)
			if off > due+slack && lostBefore && slack == 30 && !applyHasHeartbeatTimeout(t, s, wfID(d.eventID)) {
				slack += contract.ApplyTimeout.Seconds()
				lostToOldTimeout++
			}
			if off > due+slack {
				testenv.WriteHistory(t, s.ctx, s.temporal.Client, wfID(d.eventID), "", filepath.Join(s.dir, "history-late-"+d.eventID+".json"))
			}
			require.LessOrEqual(t, off, due+slack, "attempt %d of %s: %.1f s after the first, due at %.0f s (attempts %+v)", a.Number, d.eventID, off, due, d.rec.Attempts)
			latest = max(latest, off-due)
			if isLostAttemptError(a.Error) {
				lostBefore = true
				lostAttempts++
			}
		}
	}
	r.fig("attempts_lost_on_their_way", lostAttempts)
	r.fig("late_by_the_old_release_timeout", lostToOldTimeout)
	r.fig("schedules_checked", checked)
	r.fig("dead_letters_of_the_break", metTheBreak)
	r.fig("latest_attempt_past_schedule_s", fmt.Sprintf("%.1f", latest))
	require.GreaterOrEqual(t, checked, failing+len(rollEvs)-lost-metTheBreak)

	// The runs replay on this build's workflow code: the retry runs of every
	// failing event, those only old workers could have started among them,
	// the incident's and the rollout's.
	var oldRuns, replayed int
	for _, e := range append(rollEvs, evs...) {
		if !e.fails {
			continue
		}
		d := s.describe(wfID(e.id))
		require.NotNil(t, d, "the run of %s", e.id)
		if d.WorkflowExecutionInfo.GetStartTime().AsTime().Before(firstNew) {
			oldRuns++
		}
		replayRun(t, s, wfID(e.id))
		replayed++
	}
	replayRun(t, s, incidentID)
	replayRun(t, s, rolloutID)
	r.fig("runs_started_before_the_roll", oldRuns)
	r.fig("histories_replayed", replayed+2)
	require.GreaterOrEqual(t, oldRuns, len(rollEvs), "the old release's workers started runs")

	// Past a contract step the old release refuses to start, with one line
	// naming the migration (a later release's contract step, recorded here).
	stop := fmt.Sprintf("%05d_drop_what_%s_uses.sql", newSchema+1, strings.ReplaceAll(oldVersion, ".", "_"))
	_, err = s.pool.Exec(s.ctx, "INSERT INTO "+schema.Table+" (version_id, is_applied) VALUES ($1, true)", newSchema+1)
	require.NoError(t, err)
	_, err = s.pool.Exec(s.ctx, "INSERT INTO "+schema.KindsTable+" (version, name, kind) VALUES ($1, $2, 'contract')", newSchema+1, stop)
	require.NoError(t, err)
	refused := old("worker")
	select {
	case <-refused.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s worker runs past a contract step:\n%s", oldVersion, refused.logTail(20))
	}
	require.Error(t, refused.err, "it exits non-zero")
	logged, err := os.ReadFile(refused.log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(logged)), "\n")
	require.Contains(t, lines[len(lines)-1], stop+" is a contract step this build does not run on",
		"its last line names the migration:\n%s", logged)
	t.Logf("the %s worker past a contract step: %s", oldVersion, lines[len(lines)-1])
	r.fig("past_contract_step", "refused")
}

// rollFixIR is relIR with the division guarded for the keys "roll-…" only:
// the aside events apply, the stream's failing events still fail.
var rollFixIR = strings.Replace(relIR, "      ratio: event.payload.one / event.payload.d\n",
	"      ratio: \"event.entityId.startsWith('roll-') && event.payload.d == 0 ? 0 : event.payload.one / event.payload.d\"\n", 1)

// replayRun replays the history of workflow id (its latest run) on this
// build's workflow code, as workflows/replay_test.go replays the recorded
// histories of workflows/testdata.
func replayRun(t *testing.T, s *stack, id string) {
	t.Helper()
	h := runHistory(t, s, id)
	rp := replayRegistry{sdkworker.NewWorkflowReplayer()}
	// The worker's own registration: the names and options it runs them with.
	causetworker.Register(rp, &activities.Activities{})
	causetworker.RegisterIncidents(rp, &activities.Incidents{})
	causetworker.RegisterRollouts(rp, &activities.Rollouts{})
	require.NoError(t, rp.ReplayWorkflowHistory(nil, h), "the history of %s replays on this build", id)
}

// runHistory reads the history of id's current run.
func runHistory(t *testing.T, s *stack, id string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	it := s.temporal.Client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err, "history of %s", id)
		h.Events = append(h.Events, ev)
	}
	return h
}

// applyHasHeartbeatTimeout reports whether every ApplyProjection activity
// of id's run was scheduled with a heartbeat timeout (this build's workflow
// code schedules it with one; the previous release's without).
func applyHasHeartbeatTimeout(t *testing.T, s *stack, id string) bool {
	t.Helper()
	for _, ev := range runHistory(t, s, id).Events {
		a := ev.GetActivityTaskScheduledEventAttributes()
		if a != nil && a.GetActivityType().GetName() == contract.ApplyProjectionActivity && a.GetHeartbeatTimeout().AsDuration() == 0 {
			return false
		}
	}
	return true
}

// replayRegistry is a replayer the worker's Register functions register on:
// its workflows; activities are not run in a replay.
type replayRegistry struct{ sdkworker.WorkflowReplayer }

func (replayRegistry) RegisterActivity(any)                                         {}
func (replayRegistry) RegisterActivityWithOptions(any, activity.RegisterOptions)    {}
func (replayRegistry) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}
func (replayRegistry) RegisterNexusService(*nexus.Service)                          {}
