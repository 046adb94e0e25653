package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
)

// orderApplier records the order events are applied in and fails chosen
// events a number of times.
type orderApplier struct {
	mu      sync.Mutex
	fails   map[string]int
	applied []string
}

func (o *orderApplier) Apply(_ context.Context, name string, ev event.Envelope) (projection.Result, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fails[ev.EventID] > 0 {
		o.fails[ev.EventID]--
		return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusFailed,
			Err: &projection.ApplyError{Kind: contract.KindSQL, Err: errors.New("boom")}}, nil
	}
	o.applied = append(o.applied, ev.EventID)
	return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusApplied, IRVersion: 1}, nil
}

func laneEvent(id string, inline bool) contract.RetryInput {
	ev := testEvent()
	ev.EventID = id
	in := contract.RetryInput{Event: ev, Projection: "artist_followers", Mode: config.ModeWorkflow, Retry: config.DefaultRetry(), ReplayWindow: time.Hour}
	if inline {
		in.Mode = config.ModeInline
		in.FirstAttempt = &contract.Attempt{Number: 1, StartedAt: start, ErrorKind: "sql", Error: "boom"}
	}
	return in
}

func newLaneHarness(t *testing.T, fails map[string]int) (*harness, *orderApplier) {
	o := &orderApplier{fails: fails}
	return newHarnessWith(t, o, &fakePublisher{}), o
}

type updateResult struct {
	accepted bool
	err      error
}

func enqueue(h *harness, in contract.RetryInput) *updateResult {
	u := &updateResult{}
	h.env.UpdateWorkflow(contract.UpdateEnqueue, in.Event.EventID, &testsuite.TestUpdateCallback{
		OnAccept: func() { u.accepted = true },
		OnReject: func(err error) { u.err = err },
	}, in)
	return u
}

func laneInput() contract.LaneInput {
	return contract.LaneInput{Projection: "artist_followers", ForkID: "production", EntityID: "user-123"}
}

func TestLaneAppliesInOrderAfterHeadRetries(t *testing.T) {
	h, o := newLaneHarness(t, map[string]int{"head": 1}) // inline attempt 1 failed, attempt 2 fails, attempt 3 applies
	var updates []*updateResult
	h.env.RegisterDelayedCallback(func() {
		updates = append(updates, enqueue(h, laneEvent("head", true)))
	}, 0)
	for i, id := range []string{"e2", "e3", "e4"} {
		h.env.RegisterDelayedCallback(func() { updates = append(updates, enqueue(h, laneEvent(id, false))) }, time.Duration(i+1)*100*time.Millisecond)
	}
	h.env.ExecuteWorkflow(contract.LaneWorkflowName, laneInput())
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, []string{"head", "e2", "e3", "e4"}, o.applied)
	for _, u := range updates {
		require.True(t, u.accepted)
	}
	var st workflows.LaneStatus
	require.NoError(t, h.env.GetWorkflowResult(&st))
	require.Equal(t, 4, st.Done)
	require.True(t, st.Closing)
	require.Equal(t, "artist_followers:production:user-123", st.Key)
}

func TestLaneMovesOnAfterDeadLetter(t *testing.T) {
	h, o := newLaneHarness(t, map[string]int{"head": 100})
	h.env.RegisterDelayedCallback(func() { enqueue(h, laneEvent("head", true)) }, 0)
	h.env.RegisterDelayedCallback(func() { enqueue(h, laneEvent("e2", false)) }, 100*time.Millisecond)
	h.env.ExecuteWorkflow(contract.LaneWorkflowName, laneInput())
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, []string{"e2"}, o.applied)
	require.Len(t, h.publisher.records, 1, "the head was dead-lettered")
}

func TestLaneRefusesEventsOfAnotherKey(t *testing.T) {
	h, o := newLaneHarness(t, nil)
	var wrong *updateResult
	h.env.RegisterDelayedCallback(func() {
		enqueue(h, laneEvent("head", false))
		other := laneEvent("other", false)
		other.Event.EntityID = "user-999"
		wrong = enqueue(h, other)
	}, 0)
	h.env.ExecuteWorkflow(contract.LaneWorkflowName, laneInput())
	require.NoError(t, h.env.GetWorkflowError())
	require.False(t, wrong.accepted)
	require.ErrorContains(t, wrong.err, "belongs to another lane")
	require.Equal(t, []string{"head"}, o.applied)
}

// A lane at its bound refuses with LaneFullErrorType (the bridge keeps the
// event and tries again), then takes events again once it has room.
func TestLaneRefusesPastItsBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound func(*contract.LaneInput)
	}{
		{"events", func(in *contract.LaneInput) { in.MaxQueued = 2 }},
		{"bytes", func(in *contract.LaneInput) { in.MaxQueuedBytes = 2*len(mustJSON(t, laneEvent("e1", false))) + 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, o := newLaneHarness(t, map[string]int{"head": 1, "e1": 1}) // the head holds the queue until +3 s, e1 runs from +3 to +4 s
			var first, full, later []*updateResult
			h.env.RegisterDelayedCallback(func() { first = append(first, enqueue(h, laneEvent("head", true))) }, 0)
			h.env.RegisterDelayedCallback(func() { // the lane is running the head: two events fill its queue
				first = append(first, enqueue(h, laneEvent("e1", false)))
				first = append(first, enqueue(h, laneEvent("e2", false)))
				full = append(full, enqueue(h, laneEvent("e3", false)))
			}, 100*time.Millisecond)
			h.env.RegisterDelayedCallback(func() { later = append(later, enqueue(h, laneEvent("e4", false))) }, 3500*time.Millisecond)
			in := laneInput()
			tc.bound(&in)
			h.env.ExecuteWorkflow(contract.LaneWorkflowName, in)
			require.NoError(t, h.env.GetWorkflowError())
			for _, u := range first {
				require.True(t, u.accepted)
			}
			require.False(t, full[0].accepted)
			var ae *temporal.ApplicationError
			require.ErrorAs(t, full[0].err, &ae)
			require.Equal(t, contract.LaneFullErrorType, ae.Type())
			require.True(t, later[0].accepted, "room again once e1 left the queue: %v", later[0].err)
			require.Equal(t, []string{"head", "e1", "e2", "e4"}, o.applied)
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
