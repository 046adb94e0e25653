package contract

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
)

func TestShortKeepsOneBoundedLine(t *testing.T) {
	require.Equal(t, "a b c", Short("a\n b\t\tc ", 10))
	require.Equal(t, "abcd…", Short("abcdefgh", 5))
	require.Equal(t, "ééé", Short("ééé", 3), "runes, not bytes")
}

func TestRetrySummaryAndDetails(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	in := RetryInput{
		Event:      event.Envelope{EventID: "e-1", EventType: "ARTIST_FOLLOWED", EntityID: "fan-1", ForkID: "production"},
		Projection: "artist_followers", Mode: config.ModeInline, Retry: config.DefaultRetry(), ReplayWindow: 168 * time.Hour,
		Source:       Source{Topic: "causet.events.v1", Partition: 2, Offset: 41},
		FirstAttempt: &Attempt{Number: 1, StartedAt: at, Error: `column "followed_at" of relation "artist_followers" does not exist` + strings.Repeat(" and more", 20)},
	}
	s := in.Summary()
	require.True(t, strings.HasPrefix(s, `artist_followers · ARTIST_FOLLOWED · fan-1 · column "followed_at"`), s)
	require.LessOrEqual(t, len([]rune(s)), 200, "one line in the list")
	require.NotContains(t, s, "\n")

	d := in.Details()
	require.Contains(t, d, "from causet.events.v1 partition 2 offset 41")
	require.Contains(t, d, "Schedule: 5 attempts at +0s, +1s, +3s, +7s, +15s. Attempts 2–5 run as one ApplyProjection activity: its attempt k in the UI is attempt k+1 here.")
	require.Contains(t, d, "Attempt 1 (the bridge's) failed at 2026-12-02T12:00:00Z")
	require.Contains(t, d, "Queries → `status`")
	require.Contains(t, d, "168h0m0s")

	in.Mode, in.FirstAttempt = config.ModeWorkflow, nil
	require.Equal(t, "artist_followers · ARTIST_FOLLOWED · fan-1", in.Summary())
	require.Contains(t, in.Details(), "Attempts 1–5 run as one ApplyProjection activity, whose attempt numbers are these.")
	in.Replay = &OperatorSignal{Reason: "fixed"}
	require.Equal(t, "artist_followers · ARTIST_FOLLOWED · fan-1 · replay", in.Summary())
}

func TestApplyAndTimerSummariesUseTheProjectNumbers(t *testing.T) {
	plan := config.DefaultRetry().Plan(config.ModeInline)
	require.Equal(t, "attempts 2–5 of 5 (activity attempt k = attempt k+1)", ApplySummary(plan, 0))
	require.Equal(t, "replay 2: attempts 1–5 of 5", ApplySummary(config.DefaultRetry().Plan(config.ModeWorkflow), 2))
	require.Equal(t, "backoff before attempt 2 of 5", AttemptTimerSummary(2, 5))
}

func TestIncidentDetails(t *testing.T) {
	in := IncidentInput{Projection: "artist_followers", Fingerprint: "0123456789abcdef", Policy: config.IncidentHold, ErrorKind: "sql", SQLState: "42703",
		Error: `column "followed_at" does not exist`, Pattern: `column "followed_at" does not exist`, Sample: event.Envelope{EventID: "e-9"},
		HoldMax: time.Hour}
	require.Equal(t, `incident · artist_followers · hold · column "followed_at" does not exist`, in.Summary())
	d := in.Details()
	require.Contains(t, d, "fingerprint `0123456789abcdef` (sql, SQLSTATE 42703)")
	require.Contains(t, d, "probe applies sample event `e-9`")
	require.Contains(t, d, "A hold longer than 1h0m0s dead-letters its events.")

	next := time.Date(2026, 12, 2, 12, 0, 30, 0, time.UTC)
	st := IncidentStatus{State: IncidentHolding, EventsAffected: 40, EventsHeld: 21, Probes: 3, LastProbeError: "boom", NextProbeAt: &next}
	require.Equal(t, "**holding** · 40 events affected, 21 held · 3 probes · last probe failed: boom · next probe at 12:00:30 UTC", st.CurrentDetails())
	st.ResolvedAt, st.ResolvedBy, st.Reason, st.NextProbeAt = &next, "probe", "the fix worked: the sample event applies", nil
	require.Contains(t, st.CurrentDetails(), "Decided by probe at 12:00:30 UTC: the fix worked")
}
