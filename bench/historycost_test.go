package bench

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// A recorded dead-lettered run (workflows/testdata, a 4-attempt activity
// then the publish) counts its events by type, and its actions: the start,
// two timers, two upserts and five activity attempts.
func TestHistoryCostOfARecordedDeadLetter(t *testing.T) {
	f, err := os.Open("../workflows/testdata/dead_lettered.json")
	require.NoError(t, err)
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	c := historyCost(h.GetEvents())
	require.Equal(t, 24, c.Events)
	require.Equal(t, map[string]int{
		"WorkflowExecutionStarted": 1, "WorkflowTaskScheduled": 4, "WorkflowTaskStarted": 4, "WorkflowTaskCompleted": 4,
		"UpsertWorkflowSearchAttributes": 2, "TimerStarted": 2, "TimerFired": 1,
		"ActivityTaskScheduled": 2, "ActivityTaskStarted": 2, "ActivityTaskFailed": 1, "ActivityTaskCompleted": 1,
	}, c.ByType)
	require.Equal(t, 1+2+2+4+1, c.Actions)
	require.Contains(t, c.String(), "24 history events (ActivityTaskCompleted 1, ")
	require.Contains(t, c.String(), "), 10 billable actions")
}
