package rollout

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

// A rollout replays the dead letters of one entity in their sequence order,
// each after the one before it (its run named as what to wait for), even
// when the check found them in another order (runs listed newest first);
// other events keep their places, and an entity's events without a
// sequence wait for nothing. The order holds across the pages recorded.
func TestRecordedPagesPutAnEntitysDeadLettersInOrder(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	dead := func(id, entity string, seq int64) Failing {
		return Failing{Source: DeadLettered, WorkflowID: "run-" + id,
			Event: event.Envelope{EventID: id, EntityID: entity, ForkID: "production", Sequence: seq}}
	}
	failing := []Failing{
		dead("u0-3", "u0", 3),
		dead("u1-1", "u1", 1),
		dead("u0-1", "u0", 1),
		{Source: Parked, WorkflowID: "head", Event: event.Envelope{EventID: "p", EntityID: "u0", ForkID: "production", Sequence: 2}},
		dead("u0-2", "u0", 2),
		dead("u2-a", "u2", 0),
		dead("u2-b", "u2", 0),
	}
	var events []EventOutcome
	for _, f := range entityOrder(failing) {
		events = append(events, EventOutcome{Failing: f, Outcome: WouldApply})
	}
	require.NoError(t, recordPage(ctx, pool, "r1", "p", 0, events[:3]))
	require.NoError(t, recordPage(ctx, pool, "r1", "p", 3, events[3:]))
	rows, err := replays(ctx, pool, "r1", 0, 100)
	require.NoError(t, err)
	var got []string
	after := map[string]string{}
	for _, r := range rows {
		got = append(got, r.workflowID)
		if r.after != nil {
			after[r.workflowID] = *r.after
		}
	}
	require.Equal(t, []string{"run-u0-1", "run-u1-1", "run-u0-2", "run-u0-3", "run-u2-a", "run-u2-b"}, got)
	require.Equal(t, map[string]string{"run-u0-2": "run-u0-1", "run-u0-3": "run-u0-2"}, after)

	// A batch that starts past the predecessor still names it.
	rows, err = replays(ctx, pool, "r1", 3, 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "run-u0-3", rows[0].workflowID)
	require.Equal(t, "run-u0-2", *rows[0].after)
}
