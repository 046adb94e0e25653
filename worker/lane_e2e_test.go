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

// laneEnv is a workerEnv with the fixed IR deployed, and one entity whose
// events the tests send to its lane as the bridge does.
type laneEnv struct {
	*workerEnv
	t      *testing.T
	entity string
	lane   string
}

// shortRetry keeps these runs short: attempts at +0, +0.3, +0.9 s.
var shortRetry = config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 1, Max: time.Second}

func newLaneEnv(t *testing.T) *laneEnv {
	w := newWorkerEnv(t, fixedIR)
	entity := "user-" + w.tq
	return &laneEnv{workerEnv: w, t: t, entity: entity, lane: contract.LaneWorkflowID("artist_followers", "production", entity)}
}

// count is the number of rows the entity has.
func (e *laneEnv) count() int {
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM artist_followers WHERE user_id = $1`, e.entity).Scan(&n))
	return n
}

func (e *laneEnv) event(id, payload string) event.Envelope {
	return event.Envelope{EventID: id + "-" + e.tq, EventType: "ARTIST_FOLLOWED", EntityID: e.entity, ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(payload)}
}

// startOutside starts ev's retry workflow directly, as the bridge starts a
// key's head, after attempt 1 failed inline.
func (e *laneEnv) startOutside(ev event.Envelope) string {
	res, err := e.engine.Apply(e.ctx, "artist_followers", ev)
	require.NoError(e.t, err)
	require.NotNil(e.t, res.Err, "attempt 1 of %s fails", ev.EventID)
	id := contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
	_, err = e.srv.Client.ExecuteWorkflow(e.ctx, client.StartWorkflowOptions{ID: id, TaskQueue: e.tq, TypedSearchAttributes: temporalAttrs(ev, "artist_followers")},
		contract.RetryWorkflowName, contract.RetryInput{
			Event: ev, Projection: "artist_followers", Key: []byte(e.entity), Mode: config.ModeInline,
			FirstAttempt: &contract.Attempt{Number: 1, StartedAt: time.Now().UTC(), ErrorKind: string(res.Err.Kind), Error: res.Err.Error()},
			Retry:        shortRetry, ReplayWindow: time.Minute,
		})
	require.NoError(e.t, err)
	return id
}

// enqueue adds ev to the entity's lane as the bridge does (Update-with-Start).
func (e *laneEnv) enqueue(ev event.Envelope, waitFor string) {
	op := e.srv.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: e.lane, TaskQueue: e.tq, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, contract.LaneWorkflowName, contract.LaneInput{Projection: "artist_followers", ForkID: "production", EntityID: e.entity})
	h, err := e.srv.Client.UpdateWithStartWorkflow(e.ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: contract.UpdateEnqueue, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{contract.RetryInput{Event: ev, Projection: "artist_followers", Key: []byte(e.entity),
				Mode: config.ModeWorkflow, Retry: shortRetry, ReplayWindow: time.Minute, WaitFor: waitFor}},
		},
	})
	require.NoError(e.t, err)
	var queued int
	require.NoError(e.t, h.Get(e.ctx, &queued))
}

// childStart checks that the retry workflow id ran as the lane's child and
// returns when it started.
func (e *laneEnv) childStart(id string) time.Time {
	var describer contract.Describer = e.srv.Client
	desc, err := describer.DescribeWorkflowExecution(e.ctx, id, "")
	require.NoError(e.t, err)
	require.Equal(e.t, e.lane, desc.GetWorkflowExecutionInfo().GetParentExecution().GetWorkflowId(), "%s ran as the lane's child", id)
	return desc.GetWorkflowExecutionInfo().GetStartTime().AsTime()
}

// TestKafkaLaneWaitsForHeadEndToEnd runs, on a real server, what the bridge
// does for a blocked key: the failure that blocked it as a plain retry
// workflow (the head), and a later event of the key sent to the key's lane
// with WaitFor set to the head. The lane runs the later event only once the
// head has dead-lettered, then completes. With -record-histories the lane's
// history is written to ../workflows/testdata for the replay test.
func TestKafkaLaneWaitsForHeadEndToEnd(t *testing.T) {
	e := newLaneEnv(t)
	head := e.startOutside(e.event("head", `{}`)) // no artistId: every attempt fails
	later := e.event("later", `{"artistId":"artist-2"}`)
	e.enqueue(later, head)

	var lst workflows.LaneStatus
	require.NoError(t, e.srv.Client.GetWorkflow(e.ctx, e.lane, "").Get(e.ctx, &lst))
	require.Equal(t, 1, lst.Done)
	headSt := waitState(t, e.ctx, e.srv.Client, head, contract.StateDeadLettered, 10*time.Second)
	laterID := contract.RetryWorkflowID("artist_followers", later.ForkID, later.EventID)
	waitState(t, e.ctx, e.srv.Client, laterID, contract.StateSucceeded, 10*time.Second)
	require.Len(t, headSt.Attempts, 3)
	started := e.childStart(laterID)
	require.True(t, started.After(headSt.Attempts[2].StartedAt),
		"the later event started after the head's last attempt: %v vs %v", started, headSt.Attempts[2].StartedAt)
	require.Equal(t, 1, e.count(), "only the later event wrote a row")
	if *recordHistories {
		writeHistory(t, e.ctx, e.srv.Client, e.lane, "lane_waits_for_head.json")
	}
}

// TestKafkaLaneWaitsForEventHandedOverBefore: an event whose retry
// workflow already exists when the lane gets it (a bridge crashed after
// handing it over, before committing its offset, and the next one sends it
// again) is not started twice, and the key's next event still waits until
// it settles.
func TestKafkaLaneWaitsForEventHandedOverBefore(t *testing.T) {
	e := newLaneEnv(t)
	first := e.event("first", `{}`)
	firstID := e.startOutside(first)
	next := e.event("next", `{"artistId":"artist-3"}`)
	e.enqueue(first, "")
	e.enqueue(next, "")

	var lst workflows.LaneStatus
	require.NoError(t, e.srv.Client.GetWorkflow(e.ctx, e.lane, "").Get(e.ctx, &lst))
	require.Equal(t, 2, lst.Done)
	firstSt := waitState(t, e.ctx, e.srv.Client, firstID, contract.StateDeadLettered, 10*time.Second)
	require.Len(t, firstSt.Attempts, 3, "one run of the first event's workflow")
	nextID := contract.RetryWorkflowID("artist_followers", next.ForkID, next.EventID)
	waitState(t, e.ctx, e.srv.Client, nextID, contract.StateSucceeded, 10*time.Second)
	started := e.childStart(nextID)
	require.True(t, started.After(firstSt.Attempts[2].StartedAt),
		"the next event started after the first one's last attempt: %v vs %v", started, firstSt.Attempts[2].StartedAt)
	require.Equal(t, 1, e.count())
	if *recordHistories {
		writeHistory(t, e.ctx, e.srv.Client, e.lane, "lane_waits_for_event_handed_over_before.json")
	}
}
