package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/worker"
)

// behaviors records the versioning behavior each workflow is registered with.
type behaviors struct {
	sdkworker.Registry
	got map[string]workflow.VersioningBehavior
}

func (b *behaviors) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	b.got[o.Name] = o.VersioningBehavior
}

func (b *behaviors) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

func TestVersioningBehaviorOfEveryWorkflow(t *testing.T) {
	r := &behaviors{got: map[string]workflow.VersioningBehavior{}}
	worker.Register(r, &activities.Activities{})
	require.Equal(t, workflow.VersioningBehaviorAutoUpgrade, r.got[contract.RetryWorkflowName])
	require.Equal(t, workflow.VersioningBehaviorAutoUpgrade, r.got[contract.IncidentWorkflowName])
	require.NotContains(t, r.got, contract.LaneWorkflowName, "lanes are gone")
	for name, b := range r.got {
		require.NotEqual(t, workflow.VersioningBehaviorUnspecified, b, "workflow %s has no versioning behavior", name)
	}
}

func TestVersioningOptions(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	opts := worker.Options{Client: c, TaskQueue: "tq", Activities: &activities.Activities{}}

	// The SDK panics here if a workflow is registered without a behavior
	// on a versioned worker.
	opts.Version = sdkworker.WorkerDeploymentVersion{DeploymentName: "causet-worker", BuildID: "v1"}
	w, err := worker.New(opts)
	require.NoError(t, err)
	require.NotNil(t, w)

	for _, v := range []sdkworker.WorkerDeploymentVersion{{DeploymentName: "causet-worker"}, {BuildID: "v1"}} {
		opts.Version = v
		_, err := worker.New(opts)
		require.EqualError(t, err, "worker: Version needs both DeploymentName and BuildID, or neither")
	}
}
