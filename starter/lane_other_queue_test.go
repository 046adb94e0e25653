package starter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

// A lane left open on another task queue (by a deployment that ran with
// another CAUSET_TASK_QUEUE) is the run a key's later events join, and no
// worker of this deployment runs it. The bridge says so and holds the event
// uncommitted; once a worker polls that queue (the runbook's remedy) the
// lane runs or refuses it, and the event is applied once.
func TestBridgeKafkaLaneOnOtherQueue(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1})
	h.startWorker()
	entity := h.prefix + "artist-oq"
	laneID := contract.LaneWorkflowID("artist_stats", "production", entity)
	otherQueue := h.taskQueue + "-old"
	stale, err := h.temporal.Client.ExecuteWorkflow(h.ctx, client.StartWorkflowOptions{ID: laneID, TaskQueue: otherQueue},
		contract.LaneWorkflowName, contract.LaneInput{Projection: "artist_stats", ForkID: "production", EntityID: entity})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = h.temporal.Client.TerminateWorkflow(context.Background(), laneID, stale.GetRunID(), "test ended")
	})

	o := h.options(nil)
	o.StartTimeout = 2 * time.Second
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	h.start(o)

	head := played(h.prefix+"oq-head", entity, 1, 0) // division by zero: blocks the key, dead-lettered after 2 attempts
	later := played(h.prefix+"oq-later", entity, 1, 1)
	h.produce(envRecord(0, head), envRecord(0, later))

	require.Eventually(t, func() bool { return len(h.logs.lines("bridge_lane_on_other_queue")) > 0 },
		30*time.Second, 100*time.Millisecond, "the bridge names the lane's task queue")
	line := h.logs.lines("bridge_lane_on_other_queue")[0]
	require.Equal(t, otherQueue, line["laneTaskQueue"])
	require.Equal(t, h.taskQueue, line["taskQueue"])
	require.Equal(t, stale.GetRunID(), line["laneRunId"])
	require.Equal(t, laneID, line["laneId"])
	require.False(t, testenv.CommittedToEnd(t, h.brokers, h.group, h.topic), "the later event is committed only once a lane took it")
	require.Zero(t, h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats WHERE artist_id = $1`, entity))

	h.startWorkerOn(otherQueue)
	h.waitCommittedToEnd(60 * time.Second)
	require.Eventually(t, func() bool {
		return h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats WHERE artist_id = $1`, entity) == 1
	}, 60*time.Second, 100*time.Millisecond, "the later event is applied")
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE entity_id = $1`, entity) == 0
	}, 60*time.Second, 200*time.Millisecond, "the key is unblocked")
	require.Equal(t, 1, h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats WHERE artist_id = $1`, entity), "applied once")
}
