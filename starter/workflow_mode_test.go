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
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/worker"
	"github.com/causet/projection-retry/workflows"
)

// startWorker runs the Temporal worker on the harness's task queue.
func (h *harness) startWorker() {
	h.t.Helper()
	w, err := worker.New(worker.Options{
		Client:    h.temporal.Client,
		TaskQueue: h.taskQueue,
		Activities: &activities.Activities{
			Applier:   h.engine,
			Publisher: &dlq.Publisher{Client: h.producer, Topic: h.dlqTopic},
			Logger:    h.logger,
		},
	})
	require.NoError(h.t, err)
	require.NoError(h.t, w.Start())
	h.t.Cleanup(w.Stop)
}

// status queries a retry workflow's status.
func (h *harness) status(id string) (workflows.Status, error) {
	v, err := h.temporal.Client.QueryWorkflow(h.ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return workflows.Status{}, err
	}
	var st workflows.Status
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
	require.EqualValues(t, 31, value(r.b.m.handedOff.WithLabelValues("workflow")))
	require.Zero(t, value(r.b.m.applied.WithLabelValues("applied")), "workflow mode applies nothing inline")
	require.EqualValues(t, 1, value(r.b.m.skipped))

	in, _ := h.startedInput(workflows.RetryWorkflowID("artist_stats", "production", h.prefix+"w-0"))
	require.Equal(t, config.ModeWorkflow, in.Mode)
	require.Nil(t, in.FirstAttempt)

	require.Eventually(t, func() bool {
		desc, err := h.describe(workflows.RetryWorkflowID("artist_stats", "production", h.prefix+"w-1"))
		return err == nil && desc.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, 30*time.Second, 100*time.Millisecond)

	badID := workflows.RetryWorkflowID("artist_stats", "production", bad.EventID)
	var st workflows.Status
	require.Eventually(t, func() bool {
		var err error
		st, err = h.status(badID)
		return err == nil && st.State == workflows.StateDeadLettered
	}, 30*time.Second, 100*time.Millisecond)
	require.Len(t, st.Attempts, 2)
	require.Equal(t, "ir_eval", st.Attempts[0].ErrorKind)
	require.NotNil(t, st.DLQ)
}
