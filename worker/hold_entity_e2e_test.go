package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/workflows"
)

// TestKafkaHoldEntityLaneWaitsForDeadLetterReplay is the seed's follow /
// unfollow case with CAUSET_DLQ_HOLD_ENTITY: a follow dead-letters (the
// table lacks followed_at), the user's later unfollow waits behind it in
// the lane instead of applying at once; the IR is fixed and the follow
// replayed: it applies, then the unfollow does, and the user follows nobody,
// as the events say. Without the hold the unfollow would apply first and
// the replayed follow would bring the row back.
func TestKafkaHoldEntityLaneWaitsForDeadLetterReplay(t *testing.T) {
	w := newWorkerEnv(t, brokenIR)
	entity := "user-" + w.tq
	e := &laneEnv{workerEnv: w, t: t, entity: entity, lane: contract.LaneWorkflowID("artist_followers", "production", entity)}

	follow := e.event("follow", `{"artistId":"artist-1"}`)
	head := e.startOutside(follow)
	waitState(t, e.ctx, e.srv.Client, head, contract.StateDeadLettered, 15*time.Second)

	unfollow := e.event("unfollow", `{"artistId":"artist-1"}`)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	op := e.srv.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: e.lane, TaskQueue: e.tq, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, contract.LaneWorkflowName, contract.LaneInput{Projection: "artist_followers", ForkID: "production", EntityID: e.entity, HoldEntity: true})
	h, err := e.srv.Client.UpdateWithStartWorkflow(e.ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: contract.UpdateEnqueue, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{contract.RetryInput{Event: unfollow, Projection: "artist_followers", Key: []byte(e.entity),
				Mode: config.ModeWorkflow, Retry: shortRetry, ReplayWindow: time.Minute, WaitFor: head}},
		},
	})
	require.NoError(t, err)
	require.NoError(t, h.Get(e.ctx, nil))

	// The dead-lettered follow holds the user: the unfollow does not start.
	unfollowID := contract.RetryWorkflowID("artist_followers", unfollow.ForkID, unfollow.EventID)
	time.Sleep(3 * time.Second)
	_, err = e.srv.Client.DescribeWorkflow(e.ctx, unfollowID, "")
	require.Error(t, err, "the unfollow waits behind the dead letter")
	v, err := e.srv.Client.QueryWorkflow(e.ctx, e.lane, "", contract.QueryLaneStatus)
	require.NoError(t, err)
	var lst workflows.LaneStatus
	require.NoError(t, v.Get(&lst))
	require.Equal(t, head, lst.Current)
	require.Equal(t, 0, lst.Done)

	deploy(t, e.ctx, e.pool, fixedIR)
	require.NoError(t, e.srv.Client.SignalWorkflow(e.ctx, head, "", contract.SignalReplay, contract.OperatorSignal{Identity: "test", Reason: "fixed"}))
	headSt := waitState(t, e.ctx, e.srv.Client, head, contract.StateSucceeded, 15*time.Second)
	waitState(t, e.ctx, e.srv.Client, unfollowID, contract.StateSucceeded, 15*time.Second)
	require.NoError(t, e.srv.Client.GetWorkflow(e.ctx, e.lane, "").Get(e.ctx, &lst))
	require.Equal(t, 1, lst.Done)
	started := e.childStart(unfollowID)
	last := headSt.Attempts[len(headSt.Attempts)-1]
	require.True(t, started.After(last.StartedAt), "the unfollow ran after the replayed follow: %v vs %v", started, last.StartedAt)
	require.Equal(t, 0, e.count(), "follow then unfollow: the user follows nobody")
}

// TestKafkaReplayRefusedWhenEntityMovedOn is the same case without the
// hold: the unfollow applied while the follow was a dead letter, so the
// follow's replay would bring back a row the user removed. The replay is
// refused (the run is dead-lettered again, saying why) until it is forced.
func TestKafkaReplayRefusedWhenEntityMovedOn(t *testing.T) {
	w := newWorkerEnv(t, brokenIR)
	entity := "user-" + w.tq
	e := &laneEnv{workerEnv: w, t: t, entity: entity, lane: contract.LaneWorkflowID("artist_followers", "production", entity)}

	follow := e.event("follow", `{"artistId":"artist-1"}`)
	follow.Sequence = 1
	unfollow := e.event("unfollow", `{"artistId":"artist-1"}`)
	unfollow.EventType, unfollow.Sequence = "ARTIST_UNFOLLOWED", 2
	for _, ev := range []event.Envelope{follow, unfollow} {
		_, err := e.pool.Exec(e.ctx, `INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response)
VALUES ($1, 'FollowArtist', $2, 'production', 'succeeded', 1, '{}')`, ev.EventID, entity)
		require.NoError(t, err)
		_, err = e.pool.Exec(e.ctx, `INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope)
VALUES ($1, 'production', $2, $3, $4, $1, '{}')`, ev.EventID, entity, ev.Sequence, ev.EventType)
		require.NoError(t, err)
	}

	head := e.startOutside(follow)
	waitState(t, e.ctx, e.srv.Client, head, contract.StateDeadLettered, 15*time.Second)
	// Without the hold the key moves on: the unfollow applies.
	res, err := e.engine.Apply(e.ctx, "artist_followers", unfollow)
	require.NoError(t, err)
	require.Nil(t, res.Err)

	deploy(t, e.ctx, e.pool, fixedIR)
	require.NoError(t, e.srv.Client.SignalWorkflow(e.ctx, head, "", contract.SignalReplay, contract.OperatorSignal{Identity: "test", Reason: "fixed"}))
	var st contract.Status
	require.Eventually(t, func() bool {
		st = waitState(t, e.ctx, e.srv.Client, head, contract.StateDeadLettered, 15*time.Second)
		return st.ReplayCount == 1
	}, 20*time.Second, 200*time.Millisecond)
	last := st.Attempts[len(st.Attempts)-1]
	require.Equal(t, string(contract.KindInvalidEvent), last.ErrorKind)
	require.Contains(t, last.Error, "replay refused: artist_followers already applied a later event of entity "+entity+" (sequence 2")
	require.Equal(t, 0, e.count(), "the refused replay wrote nothing: the user stays unfollowed")
	require.NotEmpty(t, e.logs.lines(t, "projection_replay_refused"))

	require.NoError(t, e.srv.Client.SignalWorkflow(e.ctx, head, "", contract.SignalReplay, contract.OperatorSignal{Identity: "test", Reason: "really", Force: true}))
	waitState(t, e.ctx, e.srv.Client, head, contract.StateSucceeded, 15*time.Second)
	require.Equal(t, 1, e.count(), "forced, the old event applies")
}
