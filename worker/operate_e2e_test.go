package worker_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/worker"
)

// docs/OPERATING.md's procedure, on the dev server: the worker's
// gauges find the open dead letters through visibility; a task-queue rate
// limit is set; Temporal's own batch signal, selected by our search
// attributes, replays one projection's dead letters (and no other's); the
// batch is listed and described; each replay is logged with the identity
// and reason of its payload and counted; the gauges drop the replayed ones.
func TestKafkaBulkReplayWithTemporalBatch(t *testing.T) {
	e := newWorkerEnv(t, testenv.FollowersIR)
	ctx, srv, tq := e.ctx, e.srv, e.tq
	retry := config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}

	start := func(projectionName, eventID string) string {
		ev := event.Envelope{
			EventID: eventID, EventType: "ARTIST_FOLLOWED", EntityID: "user-" + eventID, ForkID: "production",
			OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-9"}`),
		}
		in := contract.RetryInput{Event: ev, Projection: projectionName, Key: []byte(ev.EntityID), Mode: config.ModeWorkflow,
			Source: contract.Source{Topic: "causet.events.v1", Offset: 1}, Retry: retry, ReplayWindow: time.Hour}
		_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: in.WorkflowID(), TaskQueue: tq, TypedSearchAttributes: in.SearchAttributes(),
		}, contract.RetryWorkflowName, in)
		require.NoError(t, err)
		return in.WorkflowID()
	}
	var followers []string
	for i := range 3 {
		followers = append(followers, start("artist_followers", fmt.Sprintf("bulk-%d-%s", i, tq)))
	}
	// Another projection's dead letter, which the batch's query leaves alone
	// (not deployed: every attempt fails as ir_eval).
	other := start("artist_stats", "other-"+tq)
	for _, id := range append([]string{other}, followers...) {
		waitState(t, ctx, srv.Client, id, contract.StateDeadLettered, time.Minute)
	}
	deadLettered := time.Now()

	// The worker's gauges, from a visibility scan of the open dead letters.
	reg := prometheus.NewRegistry()
	mon, err := worker.NewDeadLetterMonitor(worker.DeadLetterMonitorOptions{
		Client: srv.Client, Namespace: srv.Namespace, TaskQueue: tq, Registerer: reg,
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		if mon.Scan(ctx) != nil {
			return false
		}
		g := gauges(t, reg)
		return g["causet_projection_dead_letters_open"]["artist_followers/sql"] == 3 &&
			g["causet_projection_dead_letters_open"]["artist_stats/ir_eval"] == 1
	}, 20*time.Second, 300*time.Millisecond, "open dead letters: %v", gauges(t, reg))
	age := gauges(t, reg)["causet_projection_dead_letter_oldest_age_seconds"]["artist_followers/sql"]
	require.Greater(t, age, 0.0)
	require.LessOrEqual(t, age, time.Since(deadLettered).Seconds()+5, "counted from the dead letter (the memo)")

	// Pace the replay's attempts (the activity task queue) before it starts.
	_, err = srv.CLI("task-queue", "config", "set", "--task-queue", tq, "--task-queue-type", "activity",
		"--queue-rps-limit", "20", "--queue-rps-limit-reason", "bulk replay of artist_followers")
	require.NoError(t, err)
	out, err := srv.CLI("task-queue", "config", "get", "--task-queue", tq, "--task-queue-type", "activity", "-o", "json")
	require.NoError(t, err)
	require.Contains(t, out, `"requestsPerSecond": 20`)
	t.Cleanup(func() {
		_, err := srv.CLI("task-queue", "config", "set", "--task-queue", tq, "--task-queue-type", "activity", "--queue-rps-limit", "default")
		require.NoError(t, err)
	})

	deploy(t, ctx, e.pool, testenv.FollowersFixedIR)
	query := fmt.Sprintf(`CausetRetryState="dead_lettered" AND CausetProjection="artist_followers" AND ExecutionStatus="Running" AND TaskQueue=%q`, tq)
	require.Eventually(t, func() bool { return len(srv.ListWorkflows(t, query)) == 3 }, 20*time.Second, 300*time.Millisecond)
	out, err = srv.CLI("workflow", "signal", "--query", query, "--name", contract.SignalReplay,
		"--input", `{"identity":"alice@ops","reason":"IR v2 drops followed_at"}`,
		"--reason", "IR v2 drops followed_at", "--rps", "20", "--yes")
	require.NoError(t, err)
	t.Logf("temporal workflow signal --query: %s", strings.TrimSpace(out))
	jobID := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(out)
	require.NotEmpty(t, jobID, "the batch job's ID in %q", out)

	// The batch job runs as a system workflow of the dev server's, which a
	// loaded machine may start seconds late: the waits allow for it.
	for _, id := range followers {
		st := waitState(t, ctx, srv.Client, id, contract.StateSucceeded, 90*time.Second)
		require.Equal(t, 1, st.ReplayCount)
		require.Equal(t, &contract.OperatorAction{Action: "replay", Identity: "alice@ops", Reason: "IR v2 drops followed_at", At: st.LastAction.At}, st.LastAction)
	}
	require.Equal(t, contract.StateDeadLettered, waitState(t, ctx, srv.Client, other, contract.StateDeadLettered, time.Second).State)

	// Temporal keeps the batch job, its reason and its counts.
	var job map[string]any
	require.Eventually(t, func() bool {
		out, err := srv.CLI("batch", "describe", "--job-id", jobID, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &job) != nil {
			return false
		}
		return fmt.Sprint(job["state"]) == "BATCH_OPERATION_STATE_COMPLETED"
	}, 90*time.Second, 500*time.Millisecond, "batch job %s: %v", jobID, job)
	t.Logf("temporal batch describe: %v", job)
	require.EqualValues(t, "3", fmt.Sprint(job["completeOperationCount"]))
	require.Equal(t, "IR v2 drops followed_at", job["reason"])
	out, err = srv.CLI("batch", "list", "-o", "json")
	require.NoError(t, err)
	require.Contains(t, out, jobID)

	// Each replay: a projection_operator_action line with who and why, and the counter.
	var lines []map[string]any
	for _, l := range e.logs.Where(t, "event", "projection_operator_action") {
		if strings.Contains(fmt.Sprint(l["workflowId"]), tq) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 3)
	var ids []string
	for _, l := range lines {
		require.Equal(t, "INFO", l["level"])
		require.Equal(t, "replay", l["action"])
		require.Equal(t, "acted", l["outcome"])
		require.Equal(t, "alice@ops", l["identity"])
		require.Equal(t, "IR v2 drops followed_at", l["reason"])
		require.Equal(t, "artist_followers", l["projectionName"])
		require.Equal(t, "dead_lettered", l["state"])
		ids = append(ids, l["workflowId"].(string))
	}
	require.ElementsMatch(t, followers, ids)
	// (The worker's own registry: only this test's workflows count here.)
	require.Eventually(t, func() bool {
		return testenv.SumMetric(t, e.reg, contract.MetricOperatorActions,
			map[string]string{"projection": "artist_followers", "action": "replay", "outcome": "acted"}) == 3
	}, 10*time.Second, 200*time.Millisecond, "operator actions counted")

	// The replayed dead letters leave the gauges; the other one stays.
	require.Eventually(t, func() bool {
		if mon.Scan(ctx) != nil {
			return false
		}
		open := gauges(t, reg)["causet_projection_dead_letters_open"]
		return open["artist_followers/sql"] == 0 && open["artist_stats/ir_eval"] == 1
	}, 20*time.Second, 300*time.Millisecond, "open dead letters: %v", gauges(t, reg))

	if *recordHistories {
		writeHistory(t, ctx, srv.Client, followers[0], "batch_replayed.json")
	}
}
