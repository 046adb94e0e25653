package testenv_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/internal/testenv"
)

// TestTemporalListing starts two runs that no worker picks up, lists,
// describes and terminates them.
func TestTemporalListing(t *testing.T) {
	srv := testenv.Temporal(t)
	queue := testenv.TaskQueue(t)
	ids := []string{queue + "-a", queue + "-b"}
	for _, id := range ids {
		_, err := srv.Client.ExecuteWorkflow(ctx(t), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "TestenvIdle")
		require.NoError(t, err)
	}

	var runs []testenv.WorkflowExecution
	require.Eventually(t, func() bool {
		runs = srv.WorkflowsOnQueue(t, queue, "")
		return len(runs) == 2
	}, 30*time.Second, 100*time.Millisecond, "visibility lists both runs")
	got := testenv.WorkflowIDs(runs)
	slices.Sort(got)
	require.Equal(t, ids, got)
	for _, r := range runs {
		require.Equal(t, "TestenvIdle", r.Type)
		require.True(t, r.Running())
		require.NotEmpty(t, r.RunID)
		require.False(t, r.Start.IsZero())
	}
	require.Len(t, srv.WorkflowsOnQueue(t, queue, "TestenvIdle"), 2)
	require.Empty(t, srv.WorkflowsOnQueue(t, queue, "OtherType"))

	d, err := srv.DescribeWorkflow(ids[0])
	require.NoError(t, err)
	require.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())
	_, err = srv.DescribeWorkflow(queue + "-missing")
	require.Error(t, err)

	require.NoError(t, srv.Client.TerminateWorkflow(ctx(t), ids[0], "", "test"))
	d = srv.WaitWorkflowStatus(t, ids[0], 30*time.Second, enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	require.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, d.GetWorkflowExecutionInfo().GetStatus())
	require.Eventually(t, func() bool {
		return len(srv.ListWorkflows(t, `WorkflowId = "`+ids[0]+`" AND ExecutionStatus = "Terminated"`)) == 1
	}, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, srv.Client.TerminateWorkflow(ctx(t), ids[1], "", "test"))
}
