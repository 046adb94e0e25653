package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// HistoryCost is what one retry workflow cost Temporal: its history events
// by type, and the billable actions among them by Temporal Cloud's
// published rules (a start, each timer started, each search-attribute
// upsert, each signal, each activity attempt; heartbeats, which bill too,
// are not in a history and are not counted).
type HistoryCost struct {
	Events  int            `json:"events"`
	ByType  map[string]int `json:"byType"`
	Actions int            `json:"actions"`
}

// historyCost counts the history of a workflow.
func historyCost(events []*historypb.HistoryEvent) HistoryCost {
	c := HistoryCost{ByType: map[string]int{}}
	// An activity's attempts are one ActivityTaskStarted (its last attempt
	// number) or none (scheduled, never started).
	attempts := map[int64]int32{}
	for _, e := range events {
		c.Events++
		c.ByType[e.GetEventType().String()]++
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enums.EVENT_TYPE_TIMER_STARTED,
			enums.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, enums.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			c.Actions++
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			attempts[e.GetEventId()] = 0
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := e.GetActivityTaskStartedEventAttributes()
			attempts[a.GetScheduledEventId()] = max(a.GetAttempt(), 1)
		}
	}
	for _, n := range attempts {
		c.Actions += int(n)
	}
	return c
}

// readHistoryCost reads workflow id's history and counts it.
func readHistoryCost(ctx context.Context, c client.Client, id string) (HistoryCost, error) {
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return HistoryCost{}, fmt.Errorf("history of %s: %w", id, err)
		}
		events = append(events, e)
	}
	return historyCost(events), nil
}

// String is "35 events (…), 12 actions".
func (c HistoryCost) String() string {
	parts := make([]string, 0, len(c.ByType))
	for _, k := range slices.Sorted(maps.Keys(c.ByType)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.ByType[k]))
	}
	return fmt.Sprintf("%d history events (%s), %d billable actions", c.Events, strings.Join(parts, ", "), c.Actions)
}
