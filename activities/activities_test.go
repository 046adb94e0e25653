package activities_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

func TestApplyProjectionSucceeds(t *testing.T) {
	ev := followed("e1", "user-1", "artist-1")
	f := &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
		return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusApplied, IRVersion: 3}, nil
	}}
	h := newHarness(t, f, nil)
	before := time.Now()
	out, err := h.apply(applyInput(ev, 2))
	require.NoError(t, err)

	require.Equal(t, 3, out.IRVersion)
	require.False(t, out.Duplicate)
	require.Equal(t, 2, out.Attempt, "overall attempt number: FirstAttempt + activity attempt - 1")
	require.Empty(t, out.Attempts, "no earlier failed attempt")
	require.WithinRange(t, out.StartedAt, before.Add(-time.Second), time.Now())

	require.Len(t, f.calls, 1)
	require.Equal(t, projectionName, f.calls[0].projection)
	require.Equal(t, ev, f.calls[0].event)
	// The attempt is recorded as a heartbeat before the projection runs, so a
	// timeout still carries it; a success records nothing more.
	require.Equal(t, 1, f.calls[0].heartbeatsAtRun)
	hbs := h.hb.attempts(t)
	require.Len(t, hbs, 1)
	require.Equal(t, []contract.Attempt{{Number: 2, StartedAt: out.StartedAt}}, hbs[0])

	// An ordinary success is not a retry, a dead letter or a replay.
	require.Zero(t, total(t, h.reg, retriesTotal))
	require.Zero(t, total(t, h.reg, deadLettersTotal))
	require.Zero(t, total(t, h.reg, replaysTotal))
	require.Empty(t, h.logs.Lines(t))
}

func TestApplyProjectionReportsDuplicate(t *testing.T) {
	f := &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
		return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusDuplicate, IRVersion: 2}, nil
	}}
	h := newHarness(t, f, nil)
	out, err := h.apply(applyInput(followed("e1", "user-1", "artist-1"), 1))
	require.NoError(t, err)
	require.True(t, out.Duplicate)
	require.Equal(t, 2, out.IRVersion)
	require.Equal(t, 1, out.Attempt)
}

func TestApplyProjectionReplaySucceeds(t *testing.T) {
	f := &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
		return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusApplied, IRVersion: 7}, nil
	}}
	h := newHarness(t, f, nil)
	in := applyInput(followed("e1", "user-1", "artist-1"), 1)
	in.Run = 2
	out, err := h.apply(in)
	require.NoError(t, err)
	require.Equal(t, 1, out.Attempt)

	require.Equal(t, 1.0, counter(t, h.reg, replaysTotal, map[string]string{"projection": projectionName}))
	require.Zero(t, total(t, h.reg, retriesTotal))
	require.Zero(t, total(t, h.reg, deadLettersTotal))
	line := onlyLine(t, h.logs, "projection_replayed")
	require.Equal(t, "INFO", line["level"])
	require.Equal(t, "projection_replayed", line["event"])
	require.EqualValues(t, 2, line["replayCount"])
	require.EqualValues(t, 7, line["irVersion"])
	require.Equal(t, "e1", line["eventId"])

	hbs := h.hb.attempts(t)
	require.Len(t, hbs, 1)
	require.Equal(t, 2, hbs[0][0].Run, "the heartbeat records the run the attempt belongs to")
}

// Each way an apply can fail maps to the ApplicationError type the workflow
// and the DLQ record see, and only invalid events are non-retryable.
func TestApplyProjectionClassifiesFailures(t *testing.T) {
	pgMsg := `column "followed_at" of relation "artist_followers" does not exist`
	failed := func(kind contract.ErrorKind, err error) func(context.Context, int) (projection.Result, error) {
		return func(context.Context, int) (projection.Result, error) {
			return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusFailed, IRVersion: 4,
				Err: &projection.ApplyError{Kind: kind, Err: err}}, nil
		}
	}
	returned := func(err error) func(context.Context, int) (projection.Result, error) {
		return func(context.Context, int) (projection.Result, error) {
			return projection.Result{Projection: projectionName, EventID: "e1", Status: projection.StatusFailed}, err
		}
	}
	for _, tc := range []struct {
		name         string
		fn           func(context.Context, int) (projection.Result, error)
		kind         contract.ErrorKind
		msg          string
		irVersion    int
		nonRetryable bool
	}{
		{"sql failure of the pair", failed(contract.KindSQL, errors.New(pgMsg)), contract.KindSQL, pgMsg, 4, false},
		{"ir_eval failure of the pair", failed(contract.KindIREval, fmt.Errorf("%w: artist_followers", projection.ErrNotDeployed)),
			contract.KindIREval, "projection is not deployed: artist_followers", 4, false},
		{"engine refuses the event", failed(contract.KindInvalidEvent, &event.InvalidError{Reason: "payload is not an object"}),
			contract.KindInvalidEvent, "invalid event: payload is not an object", 4, true},
		{"connection lost", returned(&projection.ApplyError{Kind: contract.KindConnection, Err: io.ErrUnexpectedEOF}),
			contract.KindConnection, "unexpected EOF", 0, false},
		{"deadline exceeded", returned(fmt.Errorf("apply: %w", context.DeadlineExceeded)),
			contract.KindConnection, "apply: context deadline exceeded", 0, false},
		{"unclassified error", returned(errors.New("boom")), contract.KindSQL, "boom", 0, false},
		{"bare invalid event error", returned(&event.InvalidError{Reason: "bad"}), contract.KindInvalidEvent, "invalid event: bad", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, &fakeApplier{fn: tc.fn}, nil)
			ev := followed("e1", "user-1", "artist-1")
			_, err := h.apply(applyInput(ev, 2))
			ae, attempts := applicationError(t, err)
			require.Equal(t, string(tc.kind), ae.Type())
			require.Equal(t, tc.nonRetryable, ae.NonRetryable())
			require.Equal(t, tc.msg, ae.Message())

			require.Len(t, attempts, 1)
			a := attempts[0]
			require.Equal(t, 2, a.Number)
			require.Equal(t, string(tc.kind), a.ErrorKind)
			require.Equal(t, tc.msg, a.Error)
			require.Equal(t, tc.irVersion, a.IRVersion)
			require.False(t, a.StartedAt.IsZero())

			// The failed attempt is recorded as a heartbeat too, so the next
			// attempt reads it back.
			hbs := h.hb.attempts(t)
			require.Len(t, hbs, 2)
			require.Equal(t, attempts, hbs[1])

			labels := map[string]string{"projection": projectionName, "error_kind": string(tc.kind)}
			if tc.nonRetryable {
				require.Equal(t, 1.0, counter(t, h.reg, deadLettersTotal, labels))
				require.Zero(t, total(t, h.reg, retriesTotal))
				line := onlyLine(t, h.logs, "projection_dead_lettered")
				require.Equal(t, "ERROR", line["level"])
				require.Equal(t, string(tc.kind), line["errorKind"])
				return
			}
			require.Equal(t, 1.0, counter(t, h.reg, retriesTotal, labels))
			require.Zero(t, total(t, h.reg, deadLettersTotal))
			line := onlyLine(t, h.logs, "projection_retry")
			require.Equal(t, "WARN", line["level"])
			require.Equal(t, "2s", line["nextRetryIn"], "attempt 2 is followed by the plan's second delay")
			require.Equal(t, tc.msg, line["error"])
		})
	}
}

// An envelope that does not validate is never handed to the projection
// engine and is dead-lettered at once as invalid_event.
func TestApplyProjectionRejectsInvalidEventWithoutApplying(t *testing.T) {
	f := &fakeApplier{}
	h := newHarness(t, f, nil)
	ev := followed("", "user-1", "artist-1") // no eventId
	_, err := h.apply(applyInput(ev, 1))
	ae, attempts := applicationError(t, err)
	require.Equal(t, string(contract.KindInvalidEvent), ae.Type())
	require.True(t, ae.NonRetryable())
	require.Contains(t, ae.Message(), "invalid event")
	require.Zero(t, f.callCount(), "an invalid event must not reach the engine")
	require.Len(t, attempts, 1)
	require.Equal(t, string(contract.KindInvalidEvent), attempts[0].ErrorKind)

	require.Equal(t, 1.0, counter(t, h.reg, deadLettersTotal, map[string]string{"projection": projectionName, "error_kind": "invalid_event"}))
	require.Zero(t, total(t, h.reg, retriesTotal))
	line := onlyLine(t, h.logs, "projection_dead_lettered")
	require.Equal(t, "ERROR", line["level"])
	require.Equal(t, "invalid_event", line["errorKind"])
}

// Whether a failure is logged and counted as a retry or as a dead letter
// follows the plan: a retry needs a next attempt and a delay before it.
// Either way the error stays retryable; the workflow's policy stops it.
func TestApplyProjectionRetryOrDeadLetterFollowsThePlan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, max  int
		delays      []time.Duration
		deadLetter  bool
		nextRetryIn string
	}{
		{"first attempt", 1, 5, defaultDelays, false, "1s"},
		{"next to last attempt", 4, 5, defaultDelays, false, "8s"},
		{"last attempt", 5, 5, defaultDelays, true, ""},
		{"past the last attempt", 6, 5, defaultDelays, true, ""},
		{"no delay planned for the next attempt", 3, 5, defaultDelays[:2], true, ""},
		{"attempt numbers start at 1", 0, 5, defaultDelays, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
				return projection.Result{Status: projection.StatusFailed, IRVersion: 1,
					Err: &projection.ApplyError{Kind: contract.KindSQL, Err: errors.New("constraint")}}, nil
			}}, nil)
			in := applyInput(followed("e1", "user-1", "artist-1"), tc.first)
			in.MaxAttempts, in.Delays = tc.max, tc.delays
			_, err := h.apply(in)
			ae, attempts := applicationError(t, err)
			require.False(t, ae.NonRetryable())
			require.Equal(t, tc.first, attempts[0].Number)

			labels := map[string]string{"projection": projectionName, "error_kind": "sql"}
			if tc.deadLetter {
				require.Equal(t, 1.0, counter(t, h.reg, deadLettersTotal, labels))
				require.Zero(t, total(t, h.reg, retriesTotal))
				line := onlyLine(t, h.logs, "projection_dead_lettered")
				require.EqualValues(t, tc.first, line["retryAttempt"])
				return
			}
			require.Equal(t, 1.0, counter(t, h.reg, retriesTotal, labels))
			require.Zero(t, total(t, h.reg, deadLettersTotal))
			line := onlyLine(t, h.logs, "projection_retry")
			require.Equal(t, tc.nextRetryIn, line["nextRetryIn"])
			require.EqualValues(t, tc.first, line["retryAttempt"])
			for k, want := range map[string]string{"projectionName": projectionName, "eventType": "ARTIST_FOLLOWED",
				"entityId": "user-1", "forkId": "production", "eventId": "e1", "event": "projection_retry", "error": "constraint"} {
				require.Equal(t, want, line[k], "log field %s", k)
			}
		})
	}
}

// The attempts of earlier activity attempts come back from the heartbeat
// details; one that never reported (it timed out) is marked so.
func TestApplyProjectionCarriesEarlierAttempts(t *testing.T) {
	t1 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	t2 := t1.Add(2 * time.Second)
	earlier := []contract.Attempt{
		{Number: 2, StartedAt: t1, ErrorKind: "sql", Error: "constraint", IRVersion: 1},
		{Number: 3, StartedAt: t2}, // started, never reported: it timed out
	}
	settled := []contract.Attempt{
		earlier[0],
		{Number: 3, StartedAt: t2, ErrorKind: "sql", Error: "attempt timed out after 1m0s"},
	}

	t.Run("failure", func(t *testing.T) {
		h := newHarness(t, &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
			return projection.Result{Status: projection.StatusFailed, IRVersion: 1,
				Err: &projection.ApplyError{Kind: contract.KindIREval, Err: errors.New("division by zero")}}, nil
		}}, nil)
		h.env.SetHeartbeatDetails(earlier)
		_, err := h.apply(applyInput(followed("e1", "user-1", "artist-1"), 4))
		_, attempts := applicationError(t, err)
		require.Len(t, attempts, 3)
		require.Equal(t, settled, attempts[:2])
		require.Equal(t, 4, attempts[2].Number)
		require.Equal(t, "ir_eval", attempts[2].ErrorKind)
		require.Equal(t, "division by zero", attempts[2].Error)

		hbs := h.hb.attempts(t)
		require.Len(t, hbs, 2)
		require.Equal(t, append(slices.Clone(settled), contract.Attempt{Number: 4, StartedAt: attempts[2].StartedAt}), hbs[0],
			"the first heartbeat is every attempt so far, this one started and not yet reported")
		require.Equal(t, attempts, hbs[1])
	})

	t.Run("success", func(t *testing.T) {
		h := newHarness(t, &fakeApplier{}, nil)
		h.env.SetHeartbeatDetails(earlier)
		out, err := h.apply(applyInput(followed("e1", "user-1", "artist-1"), 4))
		require.NoError(t, err)
		require.Equal(t, settled, out.Attempts)
		require.Equal(t, 4, out.Attempt)
	})

	t.Run("undecodable details", func(t *testing.T) {
		f := &fakeApplier{}
		h := newHarness(t, f, nil)
		h.env.SetHeartbeatDetails("not a list of attempts")
		out, err := h.apply(applyInput(followed("e1", "user-1", "artist-1"), 2))
		require.NoError(t, err, "lost history never loses the event")
		require.Equal(t, 1, f.callCount())
		require.Empty(t, out.Attempts)
	})
}

// Activities without metrics or a logger still work.
func TestApplyProjectionWithoutMetricsOrLogger(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	a := &activities.Activities{Applier: &fakeApplier{fn: func(context.Context, int) (projection.Result, error) {
		return projection.Result{}, errors.New("boom")
	}}}
	env.RegisterActivityWithOptions(a.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	_, err := env.ExecuteActivity(contract.ApplyProjectionActivity, applyInput(followed("e1", "user-1", "artist-1"), 1))
	ae, _ := applicationError(t, err)
	require.Equal(t, "sql", ae.Type())
}
