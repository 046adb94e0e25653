package starter

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/enums/v1"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/rollout"
	"github.com/causet/projection-retry/worker"
)

// startWorker runs the Temporal worker on the harness's task queue, as
// under CAUSET_INCIDENT_POLICY=hold (its runs join holding incidents; only
// the incident tests have any).
func (h *harness) startWorker() {
	h.t.Helper()
	h.startWorkerOn(h.taskQueue, true)
}

// restartWorker stops the test's workers and starts one whose runs join
// holding incidents or not (policy hold or dead-letter).
func (h *harness) restartWorker(joinHolds bool) {
	h.t.Helper()
	for _, w := range h.workers {
		w.Stop()
	}
	h.workers = nil
	h.startWorkerOn(h.taskQueue, joinHolds)
}

// startWorkerOn runs the Temporal worker on queue; joinHolds is whether its
// runs join holding incidents (policy hold).
func (h *harness) startWorkerOn(queue string, joinHolds bool) {
	h.t.Helper()
	a := &activities.Activities{
		Applier:   h.engine,
		Publisher: &dlq.Publisher{Client: h.producer, Topic: h.dlqTopic},
		Logger:    h.logger,
		Heads:     parking.NewStore(h.pool),
		// As under the default CAUSET_ORDERING=entity.
		GuardEveryRun: true,
	}
	if joinHolds {
		a.Holds = incident.NewStore(h.pool)
	}
	// Rollouts restart closed dead letters on the model's schedule.
	rollouts := &rollout.Runner{
		Sources: rollout.Sources{Pool: h.pool, Temporal: h.temporal.Client, Namespace: h.temporal.Namespace, TaskQueue: queue,
			DLQ: &dlq.ReaderOptions{Brokers: h.brokers, Topic: h.dlqTopic}},
		Engine: h.engine,
		Replay: dlq.ReplayerOptions{Client: h.temporal.Client, TaskQueue: queue,
			Retry: config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 1, Max: time.Second}},
		Logger: h.logger,
	}
	w, err := worker.New(worker.Options{
		Client:     h.temporal.Client,
		TaskQueue:  queue,
		Activities: a,
		Incidents:  &activities.Incidents{Prober: h.engine, Store: incident.NewStore(h.pool), Client: h.temporal.Client},
		Rollouts:   &activities.Rollouts{Runner: rollouts},
		// 0: the worker's default.
		MaxConcurrentActivities: h.workerSlots,
	})
	require.NoError(h.t, err)
	require.NoError(h.t, w.Start())
	h.t.Cleanup(w.Stop)
	h.workers = append(h.workers, w)
}

// status queries a retry workflow's status.
func (h *harness) status(id string) (contract.Status, error) {
	v, err := h.temporal.Client.QueryWorkflow(h.ctx, id, "", contract.QueryStatus)
	if err != nil {
		return contract.Status{}, err
	}
	var st contract.Status
	return st, v.Get(&st)
}

func TestBridgeKafkaWorkflowModeEndToEnd(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 3})
	h.startWorker()
	o := h.options(nil)
	o.Mode = config.ModeWorkflow
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	r := h.start(o)

	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, envRecord(int32(i%3), played(fmt.Sprintf("%sw-%d", h.prefix, i), fmt.Sprintf("artist-%d", i%3), 1, 1)))
	}
	bad := played(h.prefix+"w-bad", "artist-0", 1, 0) // division by zero: dead-letters after 2 attempts
	recs = append(recs, envRecord(0, bad))
	recs = append(recs, envRecord(1, unlisted("w-skip", "playlist-1")))
	h.produce(recs...)

	h.waitCommittedToEnd(60 * time.Second)
	require.Eventually(t, func() bool {
		return h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats`) == 30
	}, 60*time.Second, 100*time.Millisecond, "every good event applied by its workflow")
	require.Eventually(t, func() bool { return value(r.b.m.handedOff.WithLabelValues("workflow")) == 31 }, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, value(r.b.m.applied.WithLabelValues("applied")), "workflow mode applies nothing inline")
	require.EqualValues(t, 1, value(r.b.m.skipped))

	in, _ := h.startedInput(contract.RetryWorkflowID("artist_stats", "production", h.prefix+"w-0"))
	require.Equal(t, config.ModeWorkflow, in.Mode)
	require.Nil(t, in.FirstAttempt)

	require.Eventually(t, func() bool {
		desc, err := h.describe(contract.RetryWorkflowID("artist_stats", "production", h.prefix+"w-1"))
		return err == nil && desc.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, 30*time.Second, 100*time.Millisecond)

	badID := contract.RetryWorkflowID("artist_stats", "production", bad.EventID)
	var st contract.Status
	require.Eventually(t, func() bool {
		var err error
		st, err = h.status(badID)
		return err == nil && st.State == contract.StateDeadLettered
	}, 30*time.Second, 100*time.Millisecond)
	require.Len(t, st.Attempts, 2)
	require.Equal(t, "ir_eval", st.Attempts[0].ErrorKind)
	require.NotNil(t, st.DLQ)
}

// In workflow mode with entity ordering a key's later events run only after
// its earlier event's retry workflow has settled: the failing first event
// of artist-0 keeps the key's later events parked until it is
// dead-lettered, each then started in turn, while another key's events run
// at once.
func TestBridgeKafkaWorkflowModeEntityOrder(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1})
	h.startWorker()
	o := h.options(nil)
	o.Mode = config.ModeWorkflow
	o.Ordering = config.OrderingEntity
	o.Retry = config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 1, Max: time.Second}
	r := h.start(o)

	bad := played(h.prefix+"o-bad", "artist-0", 1, 0) // division by zero: dead-letters after 3 attempts (~2 s)
	recs := []*kgo.Record{envRecord(0, bad)}
	for i := range 3 {
		recs = append(recs, envRecord(0, played(fmt.Sprintf("%so-%d", h.prefix, i), "artist-0", 1, 1)))
	}
	other := played(h.prefix+"o-other", "artist-1", 1, 1)
	recs = append(recs, envRecord(0, other))
	h.produce(recs...)

	h.waitCommittedToEnd(60 * time.Second)
	require.Eventually(t, func() bool {
		return h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats WHERE artist_id = 'artist-0'`) == 3
	}, 60*time.Second, 100*time.Millisecond, "the later events of the failing key are applied")

	badID := contract.RetryWorkflowID("artist_stats", "production", bad.EventID)
	st, err := h.status(badID)
	require.NoError(t, err)
	require.Equal(t, contract.StateDeadLettered, st.State)
	require.Len(t, st.Attempts, 3)
	lastAttempt := st.Attempts[len(st.Attempts)-1].StartedAt
	for i := range 3 {
		id := contract.RetryWorkflowID("artist_stats", "production", fmt.Sprintf("%so-%d", h.prefix, i))
		desc, err := h.describe(id)
		require.NoError(t, err)
		start := desc.WorkflowExecutionInfo.StartTime.AsTime()
		require.True(t, start.After(lastAttempt), "%s started at %s, before the failing event's last attempt at %s", id, start, lastAttempt)
	}
	otherDesc, err := h.describe(contract.RetryWorkflowID("artist_stats", "production", other.EventID))
	require.NoError(t, err)
	require.True(t, otherDesc.WorkflowExecutionInfo.StartTime.AsTime().Before(lastAttempt), "another key is not held")
	require.EqualValues(t, 5, value(r.b.m.handedOff.WithLabelValues("workflow")))
	require.Zero(t, value(r.b.m.applied.WithLabelValues("applied")), "workflow mode applies nothing inline")

	// Once its last parked event has run, the key is let go.
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE entity_id = 'artist-0'`) == 0
	}, 60*time.Second, 200*time.Millisecond, "key unblocked after its last event settled")
}
