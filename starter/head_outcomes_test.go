package starter

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

// appliedSequence is the applied-sequence mark of a user in artist_followers
// (0: none).
func (h *harness) appliedSequence(user string) int {
	return h.count(`SELECT coalesce(max(sequence), 0)::int FROM causet_applied_sequences WHERE projection = 'artist_followers' AND entity_id = $1`, user)
}

// An operator terminates a retrying head in the Temporal UI (here with the
// client, as `temporal workflow terminate` does). Its event was never
// applied and its run wrote no dead letter: the bridge dead-letters it
// itself, saying how the run ended, and only then releases the key, whose
// later event applies after it.
func TestBridgeKafkaTerminatedHeadIsDeadLetteredBeforeItsKeyIsReleased(t *testing.T) {
	h, o := followHarness(t)
	// A long schedule: the head is still retrying when it is terminated.
	o.Retry = config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 1, Max: time.Minute}
	o.headStaleAfter = time.Second
	h.start(o)
	user := h.prefix + "user-terminated"
	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 2)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, follow), envRecord(0, unfollow))
	head := contract.RetryWorkflowID("artist_followers", "production", follow.EventID)
	h.waitState(head, contract.StateRetrying)
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE entity_id = $1 AND parked = 1`, user) == 1
	}, 30*time.Second, 50*time.Millisecond, "the unfollow is parked behind the retrying follow")

	require.NoError(t, h.temporal.Client.TerminateWorkflow(h.ctx, head, "", "operator: stuck"))

	recs := h.dlqRecords(1)
	require.Len(t, recs, 1)
	require.NotNil(t, recs[0].Event)
	require.Contains(t, string(*recs[0].Event), follow.EventID)
	require.Equal(t, user, recs[0].EntityID)
	require.Contains(t, recs[0].Error, "ended (terminated) before applying or dead-lettering the event")
	require.Equal(t, string(contract.KindSQL), recs[0].ErrorKind, "the kind of its last failure")
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the key is released once its head's event is dead-lettered")
	require.Equal(t, 2, h.appliedSequence(user), "the unfollow applied after the follow's dead letter")

	lines := h.logs.Lines(t)
	deadAt, releasedAt := -1, -1
	for i, l := range lines {
		if l["event"] == "projection_dead_lettered" && l["eventId"] == follow.EventID && deadAt < 0 {
			deadAt = i
		}
		if l["event"] == "projection_key_unblocked" && l["entityId"] == user && releasedAt < 0 {
			releasedAt = i
		}
	}
	require.GreaterOrEqual(t, deadAt, 0, "the bridge logs the dead letter")
	require.Greater(t, releasedAt, deadAt, "the key is released after its head's dead letter")
}

// A head Temporal reports TIMED_OUT (its workflow run timeout passed) or
// cannot find once started is no outcome either; a head that completed is.
func TestRetryHeadStateEndsWithoutOutcome(t *testing.T) {
	for _, c := range []struct {
		status string
		ended  string
	}{
		{"WORKFLOW_EXECUTION_STATUS_TERMINATED", "terminated"},
		{"WORKFLOW_EXECUTION_STATUS_TIMED_OUT", "timed out"},
		{"WORKFLOW_EXECUTION_STATUS_FAILED", "failed"},
		{"WORKFLOW_EXECUTION_STATUS_CANCELED", "canceled"},
		{"WORKFLOW_EXECUTION_STATUS_COMPLETED", ""},
		{"", "not found"},
	} {
		d := &statusDescriber{status: c.status}
		_, ended, err := retryHeadState(context.Background(), d, "projection-retry:p:f:e")
		require.NoError(t, err)
		require.Equal(t, c.ended, ended, c.status)
	}
}

// statusDescriber describes every workflow in one status ("": not found).
type statusDescriber struct {
	status    string
	describes atomic.Int64
}

func (d *statusDescriber) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.describes.Add(1)
	if d.status == "" {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: enumspb.WorkflowExecutionStatus(enumspb.WorkflowExecutionStatus_value[d.status])}}, nil
}

// unavailableStarter is a Temporal that does not answer starts.
type unavailableStarter struct{ starts atomic.Int64 }

func (s *unavailableStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	s.starts.Add(1)
	return nil, serviceerror.NewUnavailable("temporal is down")
}

// A head whose start waits through a Temporal outage is not in Temporal
// yet: it is never described, and its key's later events stay parked
// however long the outage lasts (reading its NotFound as settled would
// apply them before it).
func TestBridgeKafkaPendingHeadIsNeverReleased(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, followersDDL: testenv.FollowersNoFollowedAtDDL, noTemporal: true})
	starter := &unavailableStarter{}
	describer := &statusDescriber{}
	o := h.options(starter)
	o.Workflows = describer
	o.TemporalProbe = func(context.Context) error { return errors.New("temporal is down") }
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.MaxBackoff = 200 * time.Millisecond
	o.headStaleAfter = 100 * time.Millisecond
	h.start(o)
	user := h.prefix + "user-pending"
	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 2)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, follow), envRecord(0, unfollow))
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE entity_id = $1 AND parked = 1 AND pending_start IS NOT NULL`, user) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return starter.starts.Load() >= 3 }, 30*time.Second, 50*time.Millisecond)
	time.Sleep(3 * staleCheckEvery)
	require.Zero(t, describer.describes.Load(), "a head whose start is pending is not described")
	require.Equal(t, 1, h.blockedRows(), "its key stays blocked")
	require.Zero(t, h.appliedSequence(user), "the unfollow is not applied before the follow")
}

// A dead letter whose run has closed is replayed as a new run (a bulk
// replay, a rollout): its attempts take the sequence guard like a
// signalled replay's, and an older follow does not overwrite the later
// unfollow. Forced, it applies.
func TestBridgeKafkaReplayAsNewRunIsGuarded(t *testing.T) {
	h, o := followHarness(t)
	h.start(o)
	user := h.prefix + "user-newrun"
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 5)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, unfollow))
	require.Eventually(t, func() bool { return h.appliedSequence(user) == 5 }, 30*time.Second, 50*time.Millisecond)
	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)

	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	replay := func(id string, force bool) contract.Status {
		ev := follow
		ev.EventID = id
		in := contract.RetryInput{Event: ev, Projection: "artist_followers", Mode: config.ModeWorkflow, Retry: o.Retry,
			ReplayWindow: time.Minute, Replay: &contract.OperatorSignal{Identity: "test", Reason: "bulk replay", Force: force}}
		_, err := h.temporal.Client.ExecuteWorkflow(h.ctx, StartOptions(h.taskQueue, in), contract.RetryWorkflowName, in)
		require.NoError(t, err)
		want := contract.StateDeadLettered
		if force {
			want = contract.StateSucceeded
		}
		return h.waitState(in.WorkflowID(), want)
	}
	st := replay(h.prefix+"follow", false)
	last := st.Attempts[len(st.Attempts)-1]
	require.Equal(t, string(contract.KindInvalidEvent), last.ErrorKind)
	require.True(t, strings.HasPrefix(last.Error, "replay refused: artist_followers already applied a later event"), last.Error)
	require.Zero(t, h.follows(user), "the refused replay took nothing back")

	replay(h.prefix+"follow-forced", true)
	require.Equal(t, 1, h.follows(user), "forced, it applies")
}

// A claim that lands after the bridge that made it is gone (killed with
// the claim in flight) fences the partition's live owner: its next
// transaction fails on the fence and rolls back, and the partition stops.
// The group still assigns the partition to it and no revoke will come, so
// it asks the group, claims again with a newer epoch and applies the event
// it had stopped at. (A bridge cut from Kafka cannot ask, and one the
// group has given the partition to another member is told so: both keep
// waiting — reliability scenario 18.)
func TestBridgeKafkaFencedBridgeReclaimsWhatTheGroupGivesIt(t *testing.T) {
	h, o := followHarness(t)
	r := h.start(o)
	first := sequenced(followed(h.prefix+"unfollow-1", h.prefix+"user-a", "artist-1"), 1)
	first.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, first))
	require.Eventually(t, func() bool { return h.appliedSequence(h.prefix+"user-a") == 1 }, 30*time.Second, 50*time.Millisecond)

	late, err := parking.Claim(h.ctx, h.pool, o.Group, h.topic, 0, "killed-bridge")
	require.NoError(t, err)
	second := sequenced(followed(h.prefix+"unfollow-2", h.prefix+"user-b", "artist-1"), 1)
	second.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, second))
	require.Eventually(t, func() bool { return len(h.logs.Containing("bridge_partition_fenced")) == 1 }, 30*time.Second, 10*time.Millisecond)
	// The group is asked a second after the fence at the earliest.
	require.Zero(t, h.appliedSequence(h.prefix+"user-b"), "the fenced transaction rolled back")
	require.Empty(t, h.logs.Containing("bridge_partition_reclaimed"))

	require.Eventually(t, func() bool { return h.appliedSequence(h.prefix+"user-b") == 1 }, 30*time.Second, 50*time.Millisecond)
	require.Len(t, h.logs.Containing("bridge_partition_reclaimed"), 1)
	require.EqualValues(t, 1, value(r.b.m.fenced))
	require.EqualValues(t, 1, value(r.b.m.reclaimed))
	var epoch int64
	var owner string
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT epoch, owner FROM causet_partition_owners WHERE consumer_group = $1 AND topic = $2 AND partition = 0`,
		o.Group, h.topic).Scan(&epoch, &owner))
	require.Equal(t, late.Epoch+1, epoch, "claimed again after the late claim")
	require.Equal(t, r.b.owner, owner)
	require.Eventually(t, func() bool { return h.committed()[0] == 2 }, 30*time.Second, 50*time.Millisecond, "and committed past the event")
}

// stats_deferred fails, at COMMIT, every transaction that writes plays_per_day 2
// for an artist ending in defer-artist: a release run holding such an event
// fails as a whole while the database answers, and is split.
const deferredFailureDDL = `
CREATE FUNCTION stats_deferred() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.artist_id LIKE '%defer-artist' AND NEW.plays_per_day = 2 THEN
    RAISE EXCEPTION 'deferred check failed (test)';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER stats_deferred AFTER INSERT OR UPDATE ON artist_stats
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stats_deferred();
`

// A release run that fails as a whole (here at COMMIT) is split in halves.
// The key's event that fails in the first half becomes its head, and the
// key's later events in the second half stay parked behind it instead of
// applying before it.
func TestBridgeKafkaSplitReleaseKeepsItsHeads(t *testing.T) {
	h, o := orderedHarness(t, 1)
	_, err := h.pool.Exec(h.ctx, deferredFailureDDL)
	require.NoError(t, err)
	h.start(o)
	artist := h.prefix + "defer-artist"
	h.flag(artist, 1)
	h.produce(envRecord(0, nth(h, artist, 1)))
	require.Eventually(t, func() bool { return h.blockedRows() == 1 }, 30*time.Second, 50*time.Millisecond)
	h.produce(envRecord(0, nth(h, artist, 2)), envRecord(0, nth(h, artist, 3)), envRecord(0, nth(h, artist, 4)))
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_parked_events WHERE entity_id = $1`, artist) == 3
	}, 30*time.Second, 50*time.Millisecond)

	h.unflag(artist) // the head applies; its release of 2, 3, 4 fails at COMMIT
	second := contract.RetryWorkflowID("artist_stats", "production", nth(h, artist, 2).EventID)
	h.waitState(second, contract.StateRetrying)
	time.Sleep(time.Second)
	require.Equal(t, []int64{1}, h.audit(artist), "3 and 4 wait behind 2, which failed alone")
	require.Equal(t, 2, h.count(`SELECT count(*) FROM causet_parked_events WHERE entity_id = $1`, artist))

	_, err = h.pool.Exec(h.ctx, `DROP TRIGGER stats_deferred ON artist_stats`)
	require.NoError(t, err)
	h.waitState(second, contract.StateSucceeded)
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, []int64{1, 2, 3, 4}, h.audit(artist), "each once, in order")
}

// hungDescriber is a Temporal frontend that accepts describes and never
// answers them.
type hungDescriber struct{ describes atomic.Int64 }

func (d *hungDescriber) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.describes.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// startedStarter starts every workflow at once (nothing runs them).
type startedStarter struct{}

func (startedStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	return nil, nil
}

// Describes of stale heads that hang (a frontend that accepts and never
// answers) do not hold up releases: a head recorded settled in its key's
// row is released at the next poll while the describes still wait.
func TestBridgeKafkaHungDescribesDoNotStallReleases(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, followersDDL: testenv.FollowersNoFollowedAtDDL, noTemporal: true})
	describer := &hungDescriber{}
	o := h.options(startedStarter{})
	o.Workflows = describer
	o.StartTimeout = 30 * time.Second // each describe hangs this long
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.headStaleAfter = 100 * time.Millisecond
	h.start(o)
	var heads []string
	for _, u := range []string{"user-a", "user-b", "user-c"} {
		user := h.prefix + u
		follow := sequenced(followed(h.prefix+u+"-follow", user, "artist-1"), 1)
		unfollow := sequenced(followed(h.prefix+u+"-unfollow", user, "artist-1"), 2)
		unfollow.EventType = "ARTIST_UNFOLLOWED"
		h.produce(envRecord(0, follow), envRecord(0, unfollow))
		heads = append(heads, contract.RetryWorkflowID("artist_followers", "production", follow.EventID))
	}
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE parked = 1 AND pending_start IS NULL`) == 3
	}, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return describer.describes.Load() >= 3 }, 30*time.Second, 50*time.Millisecond,
		"the stale heads are being described, and the describes hang")

	_, err := parking.SetHeadState(h.ctx, h.pool, heads[0], parking.HeadSettled)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.appliedSequence(h.prefix+"user-a") == 2 }, 10*time.Second, 50*time.Millisecond,
		"the settled key is released while the describes hang")
	require.Equal(t, 2, h.blockedRows())
}

// Under CAUSET_DLQ_HOLD_ENTITY a dead letter holds its key until it is
// replayed, discarded or its window ends. Its run terminated instead can no
// longer be any of those: its key is released (its DLQ record is there),
// and nothing more is dead-lettered.
func TestBridgeKafkaHeldDeadLetterWhoseRunIsTerminatedReleasesItsKey(t *testing.T) {
	h, o := followHarness(t)
	o.HoldEntity = true
	o.headStaleAfter = time.Second
	h.start(o)
	user := h.prefix + "user-held-terminated"
	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 2)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, follow), envRecord(0, unfollow))
	head := contract.RetryWorkflowID("artist_followers", "production", follow.EventID)
	h.waitState(head, contract.StateDeadLettered)
	require.Len(t, h.dlqRecords(1), 1)
	time.Sleep(3 * staleCheckEvery)
	require.Equal(t, 1, h.blockedRows(), "the dead letter holds its key")

	require.NoError(t, h.temporal.Client.TerminateWorkflow(h.ctx, head, "", "operator: cleanup"))
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the key of a held dead letter whose run is gone is released")
	require.Equal(t, 2, h.appliedSequence(user))
	require.Len(t, h.dlqRecordsNow(), 1, "its one DLQ record, none more")
}
