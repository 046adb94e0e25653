package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/worker"
	"github.com/causet/projection-retry/workflows"
)

// TestKafkaLaneWaitsForHeadEndToEnd runs, on a real server, what the bridge
// does for a blocked key: the failure that blocked it as a plain retry
// workflow (the head), and a later event of the key sent to the key's lane
// with WaitFor set to the head. The lane runs the later event only once the
// head has dead-lettered, then completes. With -record-histories the lane's
// history is written to ../workflows/testdata for the replay test.
func TestKafkaLaneWaitsForHeadEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := testenv.Postgres(t)
	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	dlqTopic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, dlqTopic, 1)

	require.NoError(t, projection.EnsureSchema(ctx, pool))
	_, err := pool.Exec(ctx, `CREATE TABLE artist_followers (user_id text NOT NULL, artist_id text NOT NULL, PRIMARY KEY (user_id, artist_id))`)
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	engine, err := projection.NewEngine(ctx, pool, logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	deploy(t, ctx, pool, fixedIR)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	tq := testenv.TaskQueue(t)
	w, err := worker.New(worker.Options{
		Client:    srv.Client,
		TaskQueue: tq,
		Activities: &activities.Activities{
			Applier:   engine,
			Publisher: &dlq.Publisher{Client: producer, Topic: dlqTopic},
			Logger:    logger,
		},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	entity := "user-" + tq
	ev := func(id, payload string) event.Envelope {
		return event.Envelope{EventID: id + "-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: entity, ForkID: "production",
			OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(payload)}
	}
	short := config.Retry{MaxAttempts: 3, Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Second}
	// The head lacks artistId: every attempt fails to evaluate.
	headEv := ev("head", `{}`)
	res, err := engine.Apply(ctx, "artist_followers", headEv)
	require.NoError(t, err)
	require.NotNil(t, res.Err)
	head := workflows.RetryWorkflowID("artist_followers", headEv.ForkID, headEv.EventID)
	_, err = srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: head, TaskQueue: tq, TypedSearchAttributes: temporalAttrs(headEv, "artist_followers")},
		workflows.RetryWorkflowName, workflows.RetryInput{
			Event: headEv, Projection: "artist_followers", Key: []byte(entity), Mode: config.ModeInline,
			FirstAttempt: &workflows.Attempt{Number: 1, StartedAt: time.Now().UTC(), ErrorKind: string(res.Err.Kind), Error: res.Err.Error()},
			Retry:        short, ReplayWindow: time.Minute,
		})
	require.NoError(t, err)

	laterEv := ev("later", `{"artistId":"artist-2"}`)
	lane := workflows.LaneWorkflowID("artist_followers", "production", entity)
	op := srv.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: lane, TaskQueue: tq, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflows.LaneWorkflowName, workflows.LaneInput{Projection: "artist_followers", ForkID: "production", EntityID: entity})
	h, err := srv.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: workflows.UpdateEnqueue, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{workflows.RetryInput{Event: laterEv, Projection: "artist_followers", Key: []byte(entity),
				Mode: config.ModeWorkflow, Retry: short, ReplayWindow: time.Minute, WaitFor: head}},
		},
	})
	require.NoError(t, err)
	var queued int
	require.NoError(t, h.Get(ctx, &queued))

	var lst workflows.LaneStatus
	require.NoError(t, srv.Client.GetWorkflow(ctx, lane, "").Get(ctx, &lst))
	require.Equal(t, 1, lst.Done)

	headSt := waitState(t, ctx, srv.Client, head, workflows.StateDeadLettered, 10*time.Second)
	later := workflows.RetryWorkflowID("artist_followers", laterEv.ForkID, laterEv.EventID)
	waitState(t, ctx, srv.Client, later, workflows.StateSucceeded, 10*time.Second)
	require.Len(t, headSt.Attempts, 3)
	var describer activities.WorkflowDescriber = srv.Client
	desc, err := describer.DescribeWorkflowExecution(ctx, later, "")
	require.NoError(t, err)
	require.Equal(t, lane, desc.GetWorkflowExecutionInfo().GetParentExecution().GetWorkflowId(), "the later event ran as the lane's child")
	started := desc.GetWorkflowExecutionInfo().GetStartTime().AsTime()
	require.True(t, started.After(headSt.Attempts[2].StartedAt),
		"the later event started after the head's last attempt: %v vs %v", started, headSt.Attempts[2].StartedAt)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM artist_followers WHERE user_id = $1`, entity).Scan(&n))
	require.Equal(t, 1, n, "only the later event wrote a row")
	if *recordHistories {
		writeHistory(t, ctx, srv.Client, lane, "lane_waits_for_head.json")
	}
}
