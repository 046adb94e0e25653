package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/workflows"
)

// TestReplayRecordedHistories replays histories recorded from a real server
// (see worker's end-to-end tests, -record-histories), so a change that makes
// the workflow non-deterministic fails here before it reaches running workflows.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in workflows/testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: workflows.RetryWorkflowName})
			r.RegisterWorkflowWithOptions(workflows.ProjectionLaneWorkflow, workflow.RegisterOptions{Name: workflows.LaneWorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
