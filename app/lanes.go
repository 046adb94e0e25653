package app

import (
	"context"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/causet/projection-retry/contract"
)

// openLanesQuery finds the ordering lanes of the release before parked
// events that are still open.
var openLanesQuery = fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Running'", contract.LaneWorkflowName)

// refuseOpenLanes refuses to start while lanes of the release before parked
// events are open: this release has no lane workflow, so their events
// would wait for a worker that no longer runs them, and its bridges would
// apply the keys' later events before them. docs/UPGRADES.md has the
// procedure.
func refuseOpenLanes(ctx context.Context, t *Temporal) error {
	resp, err := t.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: t.Namespace, Query: openLanesQuery})
	if err != nil {
		return fmt.Errorf("look for ordering lanes of the previous release (%s): %w", openLanesQuery, err)
	}
	if n := resp.GetCount(); n > 0 {
		return fmt.Errorf("%d ordering lanes (%s) of the previous release are still open in namespace %s: run that release's workers until they complete (temporal workflow list --query %q), then start this one (docs/UPGRADES.md)",
			n, contract.LaneWorkflowName, t.Namespace, openLanesQuery)
	}
	return nil
}
