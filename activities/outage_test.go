package activities_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/projection"
)

// An attempt that cannot reach the database while a new connection cannot
// reach it either is an outage: it fails as DatabaseOutage, never retried
// by the server, with no attempt recorded for it. A database that stops
// answering on an open connection is the same: the attempt's database work
// ends 10 s before the attempt's own timeout (which would count it), in
// time to probe. While the database answers a probe, a connection failure
// counts as an attempt.
func TestAnAttemptThatMeetsAnOutageCountsAsNone(t *testing.T) {
	var deadlines []time.Duration
	hung := func(ctx context.Context, _ int) (projection.Result, error) {
		dl, _ := ctx.Deadline()
		deadlines = append(deadlines, time.Until(dl))
		return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusFailed},
			fmt.Errorf("apply: %w", context.DeadlineExceeded)
	}
	h := newHarness(t, &fakeApplier{fn: hung}, nil)
	h.acts.ProbeDatabase = func(context.Context) error { return errors.New("dial tcp: i/o timeout") }
	_, err := h.apply(applyInput(followed("e1", "user-1", "artist-1"), 2))
	ae, attempts := applicationError(t, err)
	require.Equal(t, contract.DatabaseOutageType, ae.Type())
	require.True(t, ae.NonRetryable(), "the run waits for the database, not the server's retries")
	require.Empty(t, attempts, "the attempt that met the outage is not recorded")
	require.Contains(t, ae.Message(), "dial tcp: i/o timeout")
	require.Len(t, h.logs.Where(t, "event", "projection_database_outage"), 1)
	require.Empty(t, h.logs.Where(t, "event", "projection_retry"))
	// The test environment gives an attempt 10 minutes.
	require.InDelta(t, (10*time.Minute - 10*time.Second).Seconds(), deadlines[0].Seconds(), 5,
		"the database work ends 10 s before the attempt's timeout")

	h = newHarness(t, &fakeApplier{fn: hung}, nil)
	h.acts.ProbeDatabase = func(context.Context) error { return nil }
	_, err = h.apply(applyInput(followed("e1", "user-1", "artist-1"), 2))
	ae, attempts = applicationError(t, err)
	require.Equal(t, string(contract.KindConnection), ae.Type())
	require.False(t, ae.NonRetryable())
	require.Len(t, attempts, 1, "while the database answers, the failure counts")
}
