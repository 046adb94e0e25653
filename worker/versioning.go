package worker

import (
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The workflows' versioning behaviors under Worker Versioning
// (docs/ARCHITECTURE.md, "Worker versioning"). Both auto-upgrade: a retry
// workflow pinned to the build whose bug failed its event would run every
// later attempt on that build, and one waiting days in dead_lettered would
// keep an old build alive; their code stays replay-safe across builds
// (workflow.GetVersion, TestReplayRecordedHistories). Without versioning the
// SDK sends neither.
const RetryVersioningBehavior = workflow.VersioningBehaviorAutoUpgrade

// deploymentOptions turns versioning on for a non-zero version. No default
// behavior is set: on a versioned worker the SDK panics at the registration
// of a workflow without its own behavior, so none inherits one unexamined.
func deploymentOptions(v sdkworker.WorkerDeploymentVersion) sdkworker.DeploymentOptions {
	if v == (sdkworker.WorkerDeploymentVersion{}) {
		return sdkworker.DeploymentOptions{}
	}
	return sdkworker.DeploymentOptions{UseVersioning: true, Version: v}
}
