package contract_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/causet/projection-retry/contract"
)

func executionInfo(t *testing.T, status enumspb.WorkflowExecutionStatus, state contract.State) *workflowpb.WorkflowExecutionInfo {
	info := &workflowpb.WorkflowExecutionInfo{Status: status}
	if state != "" {
		p, err := converter.GetDefaultDataConverter().ToPayload(string(state))
		require.NoError(t, err)
		info.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			contract.AttrRetryState.GetName(): p,
		}}
	}
	return info
}

func TestSettled(t *testing.T) {
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	for _, tc := range []struct {
		name string
		info *workflowpb.WorkflowExecutionInfo
		want bool
	}{
		{"no such workflow", nil, true},
		{"completed", executionInfo(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, contract.StateSucceeded), true},
		{"terminated while retrying", executionInfo(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, contract.StateRetrying), true},
		{"retrying", executionInfo(t, running, contract.StateRetrying), false},
		{"replaying", executionInfo(t, running, contract.StateReplaying), false},
		{"running, state not set yet", executionInfo(t, running, ""), false},
		{"dead-lettered, waiting for replay", executionInfo(t, running, contract.StateDeadLettered), true},
		{"discarded", executionInfo(t, running, contract.StateDiscarded), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, contract.Settled(tc.info))
		})
	}
}

func TestFinal(t *testing.T) {
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	require.True(t, contract.Final(nil))
	require.True(t, contract.Final(executionInfo(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, contract.StateSucceeded)))
	require.True(t, contract.Final(executionInfo(t, running, contract.StateDiscarded)))
	require.False(t, contract.Final(executionInfo(t, running, contract.StateDeadLettered)), "an open dead letter may still be replayed")
	require.False(t, contract.Final(executionInfo(t, running, contract.StateRetrying)))
}
