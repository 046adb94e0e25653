package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/worker"
)

// TestKafkaLaneWaitsDoNotStarveRetries: many keys blocked at once, as in a
// systemic failure, each with a lane waiting for its head. The waits run on
// their own queue, so a worker with two activity slots still runs every
// head's attempts, and every lane then goes on. (With the waits on the main
// queue the first two would hold both slots for as long as the heads they
// wait for, which could then never run.)
func TestKafkaLaneWaitsDoNotStarveRetries(t *testing.T) {
	e := newWorkerEnv(t, fixedIR)
	tq := testenv.TaskQueue(t)
	producer, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	w, err := worker.New(worker.Options{
		Client: e.srv.Client, TaskQueue: tq, MaxConcurrentActivities: 2,
		Activities: &activities.Activities{Applier: e.engine, Publisher: &dlq.Publisher{Client: producer, Topic: e.dlqTopic}},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	const keys = 6
	var heads, laters []string
	for i := range keys {
		entity := fmt.Sprintf("user-%d-%s", i, tq)
		ev := func(id, payload string) event.Envelope {
			return event.Envelope{EventID: id + "-" + entity, EventType: "ARTIST_FOLLOWED", EntityID: entity, ForkID: "production",
				OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(payload)}
		}
		head := ev("head", `{}`) // no artistId: every attempt fails
		headID := contract.RetryWorkflowID("artist_followers", head.ForkID, head.EventID)
		_, err := e.srv.Client.ExecuteWorkflow(e.ctx, client.StartWorkflowOptions{ID: headID, TaskQueue: tq, TypedSearchAttributes: temporalAttrs(head, "artist_followers")},
			contract.RetryWorkflowName, contract.RetryInput{Event: head, Projection: "artist_followers", Key: []byte(entity), Mode: config.ModeWorkflow,
				Retry: shortRetry, ReplayWindow: time.Minute})
		require.NoError(t, err)
		heads = append(heads, headID)

		later := ev("later", `{"artistId":"artist-1"}`)
		op := e.srv.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: contract.LaneWorkflowID("artist_followers", "production", entity), TaskQueue: tq,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, contract.LaneWorkflowName, contract.LaneInput{Projection: "artist_followers", ForkID: "production", EntityID: entity})
		h, err := e.srv.Client.UpdateWithStartWorkflow(e.ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: op,
			UpdateOptions: client.UpdateWorkflowOptions{UpdateName: contract.UpdateEnqueue, WaitForStage: client.WorkflowUpdateStageCompleted,
				Args: []any{contract.RetryInput{Event: later, Projection: "artist_followers", Key: []byte(entity), Mode: config.ModeWorkflow,
					Retry: shortRetry, ReplayWindow: time.Minute, WaitFor: headID}}},
		})
		require.NoError(t, err)
		require.NoError(t, h.Get(e.ctx, nil))
		laters = append(laters, contract.RetryWorkflowID("artist_followers", later.ForkID, later.EventID))
	}
	for _, id := range heads {
		waitState(t, e.ctx, e.srv.Client, id, contract.StateDeadLettered, 60*time.Second)
	}
	for _, id := range laters {
		waitState(t, e.ctx, e.srv.Client, id, contract.StateSucceeded, 60*time.Second)
	}
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM artist_followers WHERE user_id LIKE '%' || $1`, tq).Scan(&n))
	require.Equal(t, keys, n)
	if *recordHistories {
		writeHistory(t, e.ctx, e.srv.Client, contract.LaneWorkflowID("artist_followers", "production", fmt.Sprintf("user-0-%s", tq)), "lane_waits_on_wait_queue.json")
	}
}
