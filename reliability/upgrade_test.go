package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/workflows"
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
// binary to this build, with a restart and a rollback halfway.
//
// Two bridges and two workers of the previous release run on its schema
// while events flow (1 % failing, each failure with later events of its key
// parked behind it, on the default schedule: attempts at 0, 1, 3, 7 and
// 15 s). Then this build's `causet migrate up`, and the processes replaced
// one at a time as a Deployment rolls them (SIGTERM, then the new one),
// workers first: an old worker killed -9 halfway and restarted on the old
// binary runs on the newer schema (the window), one bridge and one worker
// rolled back to the old release run too, and are rolled forward again.
// Afterwards every event is applied once or dead-lettered, in order per
// entity; every failing event's run made its five attempts on the schedule
// (late by at most what a kill -9 costs); the histories of the runs the old
// workers started replay on this build's workflow code; and an old process
// started past a contract step exits with one line naming it.
func TestReliability26RollingUpgrade(t *testing.T) {
	p := gate(t)
	t.Parallel()
	r := newResult(t, "rolling_upgrade/entity")
	oldBin, oldVersion := previousRelease(t)
	r.fig("from", oldVersion)
	s := newStack(t, stackOptions{partitions: 6, migrateWith: oldBin})
	oldSchema := s.countSQL(`SELECT max(version_id)::int FROM ` + schema.Table)
	r.fig("schema_from", oldSchema)

	old := func(name string) *proc { return s.startBin(oldBin, nil, name+"-"+oldVersion, nil, name) }
	cur := func(name string) *proc { return s.startBin(s.bin, nil, name+"-new", nil, name) }
	workers := []*proc{old("worker"), old("worker")}
	bridges := []*proc{old("bridge"), old("bridge")}

	n := pick(p, 6000, 20000)
	m := mix{every: 100, follow: 3, failsBehind: 10}
	var events eventLog
	produced := s.producePaced(n, pick(p, 150*time.Second, 300*time.Second), m, &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) > n/10 },
		2*time.Minute, 200*time.Millisecond, "the old release applies: %s", s.progress())

	// applying waits until bridge b applied an event itself.
	applying := func(b *proc) {
		t.Helper()
		require.Eventually(t, func() bool { return b.exited() || b.metric("causet_bridge_applied_total") > 0 },
			90*time.Second, 200*time.Millisecond, "bridge %s applies: %s", b.name, s.progress())
		require.False(t, b.exited(), "%s exited:\n%s", b.name, b.logTail(20))
	}
	// running waits 8 s and checks p is still up.
	running := func(p *proc) {
		t.Helper()
		time.Sleep(8 * time.Second)
		require.False(t, p.exited(), "%s exited:\n%s", p.name, p.logTail(20))
	}

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

	// Workers first, then bridges (docs/UPGRADES.md).
	workers[0].stop()
	firstNew := time.Now()
	workers[0] = cur("worker")
	running(workers[0])
	bridges[0].stop()
	bridges[0] = cur("bridge")
	applying(bridges[0])

	// An old worker crashes halfway through the roll and comes back on the
	// old release: the schema past its own is all expand steps, so it runs.
	workers[1].kill()
	workers[1] = old("worker")
	running(workers[1])
	require.Equal(t, 1, workers[1].logCount("the database schema is newer than this build, within its window"),
		"the restarted %s says it runs within its window:\n%s", oldVersion, workers[1].logTail(20))
	workers[1].stop()
	workers[1] = cur("worker")
	running(workers[1])

	// Roll one worker and one bridge back to the old release before the
	// roll finishes; they run; then forward again, and the last old bridge.
	workers[0].stop()
	workers[0] = old("worker")
	running(workers[0])
	bridges[0].stop()
	bridges[0] = old("bridge")
	applying(bridges[0])
	require.Equal(t, 1, bridges[0].logCount("the database schema is newer than this build, within its window"),
		"the rolled-back bridge says it runs within its window:\n%s", bridges[0].logTail(20))
	bridges[1].stop()
	bridges[1] = cur("bridge")
	applying(bridges[1])
	workers[0].stop()
	workers[0] = cur("worker")
	running(workers[0])
	bridges[0].stop()
	bridges[0] = cur("bridge")
	applying(bridges[0])
	rolled := time.Now()
	select {
	case <-produced:
		t.Logf("the stream ended before the roll did")
	default:
		r.fig("rolled_while_producing", true)
	}

	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s", s.progress())
	r.fig("drain_after_roll_s", durS(time.Since(rolled)))
	evs := events.all()
	s.waitDrained(r, evs)
	for _, p := range append(workers, bridges...) {
		require.False(t, p.exited(), "%s exited:\n%s", p.name, p.logTail(20))
	}
	v := s.verify(evs, true, true)
	r.verdict(v, true, true)

	// Every failing event's run made attempts 1 to 5 on the schedule: none
	// early (3 s of slack for clocks and the first attempt's own time), none
	// later than 30 s past it (an attempt on a worker killed -9 is tried
	// again after its 10 s heartbeat timeout, and the backoffs after it
	// count from then; a workflow task on it waits out its timeout too).
	schedule := []float64{0, 1, 3, 7, 15}
	latest := 0.0
	for _, d := range s.readDLQ() {
		require.NotEmpty(t, d.rec.Attempts, "attempts of %s", d.eventID)
		require.Equal(t, 5, d.rec.Attempts[len(d.rec.Attempts)-1].Number, "the schedule's five attempts of %s", d.eventID)
		for _, a := range d.rec.Attempts {
			off := a.StartedAt.Sub(d.rec.Attempts[0].StartedAt).Seconds()
			due := schedule[a.Number-1]
			require.GreaterOrEqual(t, off, due-3, "attempt %d of %s: %.1f s after the first, due at %.0f s", a.Number, d.eventID, off, due)
			require.LessOrEqual(t, off, due+30, "attempt %d of %s: %.1f s after the first, due at %.0f s", a.Number, d.eventID, off, due)
			latest = max(latest, off-due)
		}
	}
	r.fig("latest_attempt_past_schedule_s", fmt.Sprintf("%.1f", latest))

	// The runs only old workers could have started replay on this build's
	// workflow code, as do the others.
	var oldRuns, replayed int
	for _, e := range evs {
		if !e.fails {
			continue
		}
		d := s.describe(wfID(e.id))
		require.NotNil(t, d, "the run of %s", e.id)
		if d.WorkflowExecutionInfo.GetStartTime().AsTime().Before(firstNew) {
			oldRuns++
		}
		replayRetryRun(t, s, wfID(e.id))
		replayed++
	}
	r.fig("runs_started_before_the_roll", oldRuns)
	r.fig("histories_replayed", replayed)
	require.Positive(t, oldRuns, "some retry runs were started by the old release's workers")

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

// replayRetryRun replays the history of the retry workflow id on this
// build's workflow code (as worker.NewWorkflowReplayer does for the
// recorded histories in workflows/testdata).
func replayRetryRun(t *testing.T, s *stack, id string) {
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
	rp := worker.NewWorkflowReplayer()
	rp.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: contract.RetryWorkflowName})
	require.NoError(t, rp.ReplayWorkflowHistory(nil, h), "the history of %s replays on this build", id)
}
