package starter

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

var recordHistories = flag.Bool("record-histories", false, "write the incident histories of the end-to-end tests to ../workflows/testdata")

// followersAuditDDL records every write of artist_followers in commit
// order, so a test can check each user's events applied in order.
const followersAuditDDL = `
CREATE TABLE followers_audit (seq bigserial PRIMARY KEY, user_id text NOT NULL, artist_id text NOT NULL, op text NOT NULL);
CREATE FUNCTION followers_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO followers_audit (user_id, artist_id, op) VALUES (OLD.user_id, OLD.artist_id, 'del');
  ELSE
    INSERT INTO followers_audit (user_id, artist_id, op) VALUES (NEW.user_id, NEW.artist_id, 'ins');
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER followers_audit AFTER INSERT OR UPDATE OR DELETE ON artist_followers FOR EACH ROW EXECUTE FUNCTION followers_audit_fn();
`

func unfollowed(id, user, artist string) event.Envelope {
	ev := followed(id, user, artist)
	ev.EventType = "ARTIST_UNFOLLOWED"
	return ev
}

// incidentHarness is a harness whose artist_followers lacks followed_at (a
// schema mismatch: every ARTIST_FOLLOWED fails the same way while
// ARTIST_UNFOLLOWED and artist_stats apply), with a worker and incidents on.
func incidentHarness(t *testing.T, policy config.IncidentPolicy) (*harness, Options) {
	h, o := workingHarness(t, harnessOptions{partitions: 3, followersDDL: testenv.FollowersNoFollowedAtDDL}, followersAuditDDL)
	o.Retry = config.Retry{MaxAttempts: 4, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.Incidents = config.Incidents{Threshold: 5, Window: time.Minute, Policy: policy}
	o.IncidentStore = incident.NewStore(h.pool)
	return h, o
}

func partitionOf(user string) int32 {
	f := fnv.New32a()
	f.Write([]byte(user))
	return int32(f.Sum32() % 3)
}

// userTimeline is each user's three events: follow artist-a, unfollow it,
// follow artist-b. In order the user ends following artist-b only.
func (h *harness) userTimeline(user string) []*kgo.Record {
	p := partitionOf(user)
	return []*kgo.Record{
		envRecord(p, followed(h.prefix+user+"-1", user, "artist-a")),
		envRecord(p, unfollowed(h.prefix+user+"-2", user, "artist-a")),
		envRecord(p, followed(h.prefix+user+"-3", user, "artist-b")),
	}
}

func (h *harness) incidents() []string {
	return testenv.WorkflowIDs(h.temporal.WorkflowsOnQueue(h.t, h.taskQueue, contract.IncidentWorkflowName))
}

func (h *harness) incidentStatus(id string) contract.IncidentStatus {
	h.t.Helper()
	v, err := h.temporal.Client.QueryWorkflow(h.ctx, id, "", contract.QueryStatus)
	require.NoError(h.t, err)
	var st contract.IncidentStatus
	require.NoError(h.t, v.Get(&st))
	return st
}

// userAudit is a user's writes of artist_followers in commit order.
func (h *harness) userAudit(user string) []string {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `SELECT op || ':' || artist_id FROM followers_audit WHERE user_id = $1 ORDER BY seq`, user)
	require.NoError(h.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(h.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(h.t, rows.Err())
	return out
}

// A schema mismatch makes every ARTIST_FOLLOWED fail. Under policy hold one
// incident opens; the failures after the threshold, and their users' later
// events, are parked, not retried or dead-lettered, while artist_stats and
// ARTIST_UNFOLLOWED of other users keep applying. A bridge killed while the
// incident holds (offsets never committed) parks nothing twice. Once the
// column is added the incident's probe resolves it and every parked event
// is applied once, in each user's order.
func TestBridgeKafkaIncidentHoldsSchemaMismatch(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentHold)
	const users = 150
	var recs []*kgo.Record
	for i := range users {
		recs = append(recs, h.userTimeline(fmt.Sprintf("user-%03d", i))...)
		recs = append(recs, envRecord(int32(i%3), played(fmt.Sprintf("%splay-%d", h.prefix, i), fmt.Sprintf("artist-%d", i), 10, 1)))
	}
	h.produce(recs...)

	crashing := o
	crashing.CommitInterval = time.Hour // commits nothing: the crash re-delivers every record
	r1 := h.start(crashing)
	parked := func() int { return h.count(`SELECT count(*) FROM causet_parked_events WHERE topic = $1`, h.topic) }
	require.Eventually(t, func() bool { return parked() > 0 && len(h.incidents()) == 1 }, 60*time.Second, 200*time.Millisecond)
	require.Eventually(t, func() bool { return h.count(`SELECT count(*) FROM artist_stats`) == users }, 60*time.Second, 100*time.Millisecond,
		"the other projection keeps applying")
	time.Sleep(3 * time.Second) // let every partition reach its end
	before := parked()
	h.crash(r1)

	o.Registerer = prometheus.NewRegistry()
	r2 := h.start(o)
	h.waitCommittedToEnd(60 * time.Second)
	require.Equal(t, before, parked(), "the re-delivered records park nothing twice")
	ids := h.incidents()
	require.Len(t, ids, 1, "one incident, whatever the number of failing events")
	incidentID := ids[0]
	// The incident counts the events parked behind it; those behind the
	// threshold's heads (retry workflows, which join the hold as their
	// schedules run out) wait behind their heads.
	heldByIncident := h.count(`SELECT count(*) FROM causet_parked_events p JOIN causet_blocked_keys b
USING (topic, partition, projection, fork_id, entity_id) WHERE p.topic = $1 AND b.head_workflow_id = $2`, h.topic, incidentID)
	st := h.incidentStatus(incidentID)
	require.Equal(t, contract.IncidentHolding, st.State)
	require.Equal(t, "42703", st.SQLState)
	require.Contains(t, st.Pattern, `column "followed_at"`)

	// Workflows: the threshold's failures (users whose follow failed before
	// the incident opened) run the normal path; nothing else does.
	retries := testenv.WorkflowIDs(h.temporal.WorkflowsOnQueue(t, h.taskQueue, contract.RetryWorkflowName))
	headUsers := map[string]bool{}
	for _, id := range retries {
		for i := range users {
			u := fmt.Sprintf("user-%03d", i)
			if strings.Contains(id, ":"+h.prefix+u+"-") {
				headUsers[u] = true
			}
		}
	}
	require.LessOrEqual(t, len(headUsers), 3*(o.Incidents.Threshold-1), "retry workflows only for the threshold's users: %v", retries)
	require.Equal(t, 0, h.count(`SELECT count(*) FROM artist_followers`), "nothing of a held user applied out of order")
	require.GreaterOrEqual(t, before, 3*(users-len(headUsers)), "every event of the other users is parked")

	fixedAt := time.Now()
	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parked() == 0 }, 90*time.Second, 100*time.Millisecond)
	caughtUp := time.Since(fixedAt)
	run := h.temporal.Client.GetWorkflow(h.ctx, incidentID, "")
	var final contract.IncidentStatus
	require.NoError(t, run.Get(h.ctx, &final))
	require.Equal(t, contract.IncidentResolved, final.State)
	require.Equal(t, "probe", final.ResolvedBy)
	require.NotNil(t, final.CaughtUpAt)
	require.Equal(t, heldByIncident, final.EventsHeld, "each event parked behind the incident counted once, the re-delivered ones not again")
	require.EqualValues(t, heldByIncident, value(r2.b.inc.Metrics.Events.WithLabelValues("artist_followers", "released")),
		"the bridge that released them counted each parked event once")
	t.Logf("%d events parked; fix to caught-up %s (incident resolved %s after the fix)", before, caughtUp.Round(time.Millisecond),
		final.ResolvedAt.Sub(fixedAt).Round(time.Millisecond))

	// The heads whose schedule ran out while the incident held joined the
	// hold, and ran again after it: every user's events apply, in order, and
	// nothing is dead-lettered.
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM artist_followers WHERE artist_id = 'artist-b'`) == users
	}, 90*time.Second, 200*time.Millisecond)
	for i := range users {
		u := fmt.Sprintf("user-%03d", i)
		require.Equal(t, []string{"ins:artist-a", "del:artist-a", "ins:artist-b"}, h.userAudit(u), "user %s: applied once each, in order", u)
	}
	require.Empty(t, h.dlqRecordsNow(), "an incident under hold dead-letters nothing")
	require.Equal(t, users, h.count(`SELECT count(*) FROM artist_followers`))
	require.Equal(t, 0, h.count(`SELECT count(*) FROM causet_blocked_keys WHERE topic = $1 AND head_workflow_id LIKE 'projection-incident:%'`, h.topic),
		"released keys are unblocked")
	require.Equal(t, users, h.count(`SELECT count(*) FROM artist_stats`))
	r2.stop(t)
}

// Under policy dead-letter every failing event keeps its own schedule and
// DLQ record; one incident reports them once.
func TestBridgeKafkaIncidentDeadLetterPolicyReportsOnce(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentDeadLetter)
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.Ordering = config.OrderingNone
	const n = 30
	var recs []*kgo.Record
	for i := range n {
		u := fmt.Sprintf("user-%03d", i)
		recs = append(recs, envRecord(partitionOf(u), followed(h.prefix+u, u, "artist-a")))
	}
	h.produce(recs...)
	r := h.start(o)
	h.waitCommittedToEnd(60 * time.Second)
	records := h.dlqRecords(n)
	require.Len(t, records, n, "exactly one DLQ record per failing event")
	var ids []string
	require.Eventually(t, func() bool { ids = h.incidents(); return len(ids) == 1 }, 30*time.Second, 200*time.Millisecond)
	// Failures counted after the first report reach the workflow with the
	// next one, up to a report interval later.
	reported := incident.DefaultReportInterval + 2*incident.RefreshInterval + 10*time.Second
	require.Eventually(t, func() bool { return h.incidentStatus(ids[0]).EventsAffected == n }, reported, 200*time.Millisecond,
		"the incident counts every failing event, those before the threshold included")
	st := h.incidentStatus(ids[0])
	require.Equal(t, contract.IncidentOpen, st.State)
	require.Len(t, st.SampleEventIDs, contract.MaxIncidentSamples)
	require.Len(t, testenv.WorkflowIDs(h.temporal.WorkflowsOnQueue(t, h.taskQueue, contract.RetryWorkflowName)), n)
	lines := h.logs.Containing("projection_incident_opened")
	require.Len(t, lines, 1, "one alert line, not one per event")
	require.Equal(t, ids[0], lines[0]["incidentId"])
	require.Equal(t, 1.0, testutil.ToFloat64(r.b.inc.Metrics.Active))
	require.Equal(t, 1.0, testutil.ToFloat64(r.b.inc.Metrics.Opened.WithLabelValues("artist_followers", "dead-letter")))

	// An operator closes it.
	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, ids[0], "", contract.SignalResolve, contract.OperatorSignal{Identity: "ops", Reason: "migration rolled back"}))
	var final contract.IncidentStatus
	require.NoError(t, h.temporal.Client.GetWorkflow(h.ctx, ids[0], "").Get(h.ctx, &final))
	require.Equal(t, contract.IncidentResolved, final.State)
	require.Equal(t, "ops", final.ResolvedBy)
	r.stop(t)
}

// One genuinely bad event among good ones is an event failure, not an
// incident: fewer distinct failures than the threshold open none.
func TestBridgeKafkaIncidentThresholdRespected(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentHold)
	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, envRecord(int32(i%3), played(fmt.Sprintf("%sok-%d", h.prefix, i), fmt.Sprintf("artist-%d", i), 10, 1)))
	}
	// No artistId: this one event fails (ir_eval) on every attempt.
	bad := played(h.prefix+"bad", "artist-x", 1, 1)
	bad.Payload = []byte(`{"plays":1,"days":1}`)
	recs = append(recs, envRecord(0, bad))
	h.produce(recs...)
	r := h.start(o)
	h.waitCommittedToEnd(60 * time.Second)
	require.Equal(t, 50, h.count(`SELECT count(*) FROM artist_stats`))
	time.Sleep(2 * incident.RefreshInterval)
	require.Empty(t, h.incidents())
	require.Equal(t, 0, h.count(`SELECT count(*) FROM causet_incidents`))
	require.Equal(t, 0, h.count(`SELECT count(*) FROM causet_parked_events WHERE topic = $1`, h.topic))
	require.Len(t, h.dlqRecords(1), 1, "the bad event is dead-lettered on its own")
	r.stop(t)
}

// An operator dead-letters a hold while its failure goes on (the fix is not
// deployed yet): the fingerprint reaches the threshold again while the
// bridge dead-letters the held events. The row is not reopened until the
// first run has drained its own hold and ended; then a new hold opens with
// a run of its own that probes, and resolves and releases once the fix is
// in. Every event is applied once or dead-lettered, nothing stays parked,
// and every incident run ends.
func TestBridgeKafkaIncidentReopensAfterDeadLetterAll(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentHold)
	r := h.start(o)

	// Follows of distinct users, each failing, 250 a second until told to
	// stop: the fingerprint reaches the threshold again within the drain of
	// the first hold's 1,000 events.
	var produced []string
	var mu sync.Mutex
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			var recs []*kgo.Record
			var ids []string
			for j := range 10 {
				user := fmt.Sprintf("user-%05d", 10*i+j)
				id := fmt.Sprintf("%sreopen-%05d", h.prefix, 10*i+j)
				recs = append(recs, envRecord(partitionOf(user), followed(id, user, "artist-a")))
				ids = append(ids, id)
			}
			if err := h.producer.ProduceSync(h.ctx, recs...).FirstErr(); err != nil {
				return
			}
			mu.Lock()
			produced = append(produced, ids...)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}()

	var incidentID string
	require.Eventually(t, func() bool {
		ids := h.incidents()
		if len(ids) == 1 {
			incidentID = ids[0]
		}
		return incidentID != "" && h.count(`SELECT count(*) FROM causet_parked_events WHERE topic = $1`, h.topic) > 1000
	}, 60*time.Second, 100*time.Millisecond, "no hold of 1,000 events")
	first, err := h.temporal.Client.DescribeWorkflow(h.ctx, incidentID, "")
	require.NoError(t, err)
	firstRun := first.WorkflowExecution.RunID
	h.historyOnFailure(incidentID, firstRun)
	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, incidentID, "", contract.SignalDeadLetterAll,
		contract.OperatorSignal{Identity: "test", Reason: "the fix is not ready"}))

	// The first run drains its hold and ends, whatever the failures
	// meanwhile: it completes, or, when the row reopened before it could,
	// it takes the new hold over as a new run (continue-as-new). Get on
	// the run would follow that chain, so its close is read by describe
	// and its last state by a query of the closed run. Unloaded it ends
	// within 20 s; beside the model test's 8 parallel seeds it took 44,
	// 69 and once over 90 s, the drain slowed with the machine: the bound
	// is for a run that never ends.
	var firstClose enumspb.WorkflowExecutionStatus
	require.Eventually(t, func() bool {
		d, err := h.temporal.Client.DescribeWorkflow(h.ctx, incidentID, firstRun)
		if err != nil {
			return false
		}
		firstClose = d.Status
		return firstClose != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, 4*time.Minute, 200*time.Millisecond, "the first run never ended")
	require.Contains(t, []enumspb.WorkflowExecutionStatus{enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW}, firstClose)
	var st contract.IncidentStatus
	require.Eventually(t, func() bool {
		qctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		defer cancel()
		v, err := h.temporal.Client.QueryWorkflow(qctx, incidentID, firstRun, contract.QueryStatus)
		return err == nil && v.Get(&st) == nil
	}, 60*time.Second, time.Second, "the first run's last state cannot be read")
	t.Logf("the first run ended %s", firstClose)
	require.Equal(t, contract.IncidentDeadLettered, st.State)
	require.NotNil(t, st.CaughtUpAt)
	firstHeld := st.EventsHeld
	if *recordHistories {
		testenv.WriteHistory(t, h.ctx, h.temporal.Client, incidentID, firstRun,
			filepath.Join("..", "workflows", "testdata", "incident_dead_letter_all.json"))
	}

	// The failure goes on: a new hold (its row holding again, opened after
	// the first) with a run of its own, which resolves it by its probe
	// below. Its state is read from the row: a query waits for the worker,
	// which may be busy for minutes with the retry runs of the failures
	// between the holds on a loaded machine.
	require.Eventually(t, func() bool {
		d, err := h.temporal.Client.DescribeWorkflow(h.ctx, incidentID, "")
		if err != nil || d.WorkflowExecution.RunID == firstRun || d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return false
		}
		row, found, err := o.IncidentStore.Get(h.ctx, incidentID)
		return err == nil && found && row.State == contract.IncidentHolding && row.OpenedAt.After(st.FirstSeen)
	}, 2*time.Minute, 200*time.Millisecond, "no new hold with a run of its own")
	second, err := h.temporal.Client.DescribeWorkflow(h.ctx, incidentID, "")
	require.NoError(t, err)
	reopened, found, err := o.IncidentStore.Get(h.ctx, incidentID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, contract.IncidentHolding, reopened.State)
	require.True(t, reopened.OpenedAt.After(st.FirstSeen), "the new hold opened after the first")

	close(stop)
	<-stopped
	_, err = h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.NoError(t, h.temporal.Client.GetWorkflow(h.ctx, incidentID, second.WorkflowExecution.RunID).Get(h.ctx, &st))
	require.Equal(t, contract.IncidentResolved, st.State, "the new hold resolves by its probe: %+v", st)
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_parked_events WHERE topic = $1`, h.topic) == 0
	}, 60*time.Second, 200*time.Millisecond, "events left parked")
	h.waitCommittedToEnd(60 * time.Second)

	// Every event applied once, or dead-lettered (by the first hold, or by
	// its own run before the holds), never both; nothing vanished.
	dead := map[string]bool{}
	require.Eventually(t, func() bool {
		dead = map[string]bool{}
		for _, rec := range h.dlqRecordsNow() {
			env, err := rec.Envelope()
			require.NoError(t, err)
			dead[env.EventID] = true
		}
		open := 0
		for _, id := range h.workflowsOnQueue() {
			if d, err := h.describe(id); err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING &&
				strings.HasPrefix(id, "projection-retry:") && !dead[strings.TrimPrefix(id, "projection-retry:artist_followers:production:")] {
				open++
			}
		}
		return open == 0
	}, 90*time.Second, time.Second, "retry runs still on their schedules")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range produced {
		applied := h.count(`SELECT count(*) FROM causet_projection_applied WHERE key = $1`, projection.DedupeKey("artist_followers", "production", id))
		require.True(t, applied == 1 != dead[id], "%s: applied %d times, dead-lettered %v", id, applied, dead[id])
	}
	t.Logf("%d follows: %d dead-lettered, %d applied; the first hold held %d, the second %d", len(produced), len(dead), len(produced)-len(dead),
		firstHeld, st.EventsHeld)
	r.stop(t)
}

// Held retry runs outnumber the worker's activity slots: every run whose
// schedule ran out before the incident opened waits with the hold. The
// wait takes no slot, so the incident still probes and moves its row, and
// once the fix is in, the incident's end wakes the held runs at once (not
// at their next backoff, which by then is over a minute away) and each
// applies its event.
func TestBridgeKafkaHeldRunsOutnumberingWorkerSlotsEndWithTheirIncident(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentHold)
	o.Incidents.Threshold = 12
	h.workerSlots = 3
	h.restartWorker(true)
	const users = 40
	var recs []*kgo.Record
	for i := range users {
		user := fmt.Sprintf("user-%03d", i)
		recs = append(recs, envRecord(partitionOf(user), followed(fmt.Sprintf("%sslots-%03d", h.prefix, i), user, "artist-a")))
	}
	h.produce(recs...)
	r := h.start(o)

	heldRuns := func() []string {
		return testenv.WorkflowIDs(h.temporal.ListWorkflows(t, fmt.Sprintf(`TaskQueue = %q AND %s = %q AND ExecutionStatus = "Running"`,
			h.taskQueue, contract.AttrRetryState.GetName(), contract.StateHeld)))
	}
	var held []string
	require.Eventually(t, func() bool {
		held = heldRuns()
		return len(held) > 2*h.workerSlots
	}, 60*time.Second, 500*time.Millisecond, "no more held runs than the worker has slots")
	ids := h.incidents()
	require.Len(t, ids, 1)
	// Long enough for the held runs' backoff to reach a minute and more.
	time.Sleep(80 * time.Second)
	held = heldRuns()
	require.Greater(t, len(held), 2*h.workerSlots)

	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	var st contract.IncidentStatus
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, h.temporal.Client.GetWorkflow(ctx, ids[0], "").Get(ctx, &st), "the incident never ended")
	require.Equal(t, contract.IncidentResolved, st.State)
	ended := time.Now()
	for _, id := range held {
		var rs contract.Status
		require.NoError(t, h.temporal.Client.GetWorkflow(ctx, id, "").Get(ctx, &rs), id)
		require.Equal(t, contract.StateSucceeded, rs.State, id)
	}
	woken := time.Since(ended)
	if *recordHistories {
		testenv.WriteHistory(t, h.ctx, h.temporal.Client, held[0], "",
			filepath.Join("..", "workflows", "testdata", "held_woken_by_incident_end.json"))
	}
	t.Logf("%d held runs on %d slots; all applied %s after the incident ended", len(held), h.workerSlots, woken.Round(time.Millisecond))
	require.Less(t, woken, 30*time.Second, "held runs waited for their backoff: the incident's end did not wake them")
	h.waitCommittedToEnd(60 * time.Second)
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM artist_followers WHERE artist_id = 'artist-a'`) == users
	}, 60*time.Second, 200*time.Millisecond, "every follow applied once")
	require.Empty(t, h.dlqRecordsNow(), "nothing dead-lettered")
	r.stop(t)
}
