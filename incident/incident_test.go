package incident_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/incident"
)

func TestPatternStripsValuesKeepsIdentifiers(t *testing.T) {
	cases := map[string]string{
		`null value in column "email" of relation "users" violates not-null constraint`: `null value in column "email" of relation "users" violates not-null constraint`,
		`invalid input syntax for type integer: 'abc'`:                                  `invalid input syntax for type integer: '?'`,
		`Key (id)=(42) already exists.`:                                                 `Key (id)=(?) already exists.`,
		`value 123456 out of range for type smallint`:                                   `value ? out of range for type smallint`,
		`event 5f0c0a8e-1c2b-4b8e-9f6a-0d6f3a2b1c9d   failed  at 1.5e3`:                 `event ? failed at ?`,
		`column "col2" does not exist`:                                                  `column "col2" does not exist`,
		`values 'a '' b' and 'c'`:                                                       `values '?' and '?'`,
	}
	for in, want := range cases {
		require.Equal(t, want, incident.Pattern(in), "pattern of %q", in)
	}
	long := incident.Pattern(fmt.Sprintf("%01000d", 0) + " x")
	require.LessOrEqual(t, len(long), 512, "patterns are bounded")
}

func TestFingerprintGroupsOneFailureAcrossEvents(t *testing.T) {
	e1 := &pgconn.PgError{Code: "42703", Message: `column "followed_at" of relation "artist_followers" does not exist`}
	e2 := &pgconn.PgError{Code: "42703", Message: `column "followed_at" of relation "artist_followers" does not exist`}
	a := incident.Of("artist_followers", "sql", fmt.Errorf("apply: %w", e1))
	b := incident.Of("artist_followers", "sql", e2)
	require.Equal(t, a.ID, b.ID)
	require.Equal(t, "42703", a.SQLState)
	require.Len(t, a.ID, 16)

	v1 := incident.Of("p", "sql", &pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "u"`})
	v2 := incident.Of("p", "sql", &pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "u"`})
	require.Equal(t, v1.ID, v2.ID, "values in the detail are not in the message")

	differ := []incident.Fingerprint{
		a,
		incident.Of("other_projection", "sql", e1),
		incident.Of("artist_followers", "ir_eval", e1),
		incident.Of("artist_followers", "sql", &pgconn.PgError{Code: "42P01", Message: e1.Message}),
		incident.Of("artist_followers", "sql", &pgconn.PgError{Code: "42703", Message: `column "other" of relation "artist_followers" does not exist`}),
		incident.Of("artist_followers", "ir_eval", errors.New("no such key: artistId")),
	}
	seen := map[string]int{}
	for i, f := range differ {
		j, dup := seen[f.ID]
		require.False(t, dup, "fingerprints %d and %d differ", i, j)
		seen[f.ID] = i
	}
	require.Equal(t, incident.Of("p", "ir_eval", errors.New(`eval "x": division by 7`)).ID,
		incident.Of("p", "ir_eval", errors.New(`eval "x": division by 9`)).ID)
}

func TestDetectorCountsDistinctEventsInWindow(t *testing.T) {
	d := incident.NewDetector(3, time.Minute)
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	require.False(t, d.Observe("fp", "e1", t0))
	require.False(t, d.Observe("fp", "e1", t0.Add(time.Second)), "the same event failing again counts once")
	require.False(t, d.Observe("fp", "e2", t0.Add(2*time.Second)))
	require.False(t, d.Observe("other", "e3", t0.Add(3*time.Second)), "another fingerprint has its own count")
	require.True(t, d.Observe("fp", "e3", t0.Add(4*time.Second)))
	require.True(t, d.Observe("fp", "e4", t0.Add(5*time.Second)), "past the threshold it stays reached")

	// Spread over more than the window: never three at once.
	d = incident.NewDetector(3, time.Minute)
	for i := range 10 {
		require.False(t, d.Observe("fp", fmt.Sprint("e", i), t0.Add(time.Duration(i)*40*time.Second)), "event %d", i)
	}

	d.Observe("gone", "e1", t0)
	d.Observe("gone", "e2", t0)
	d.Forget("gone")
	require.False(t, d.Observe("gone", "e3", t0), "Forget restarts the count")
}

func TestDetectorIsBounded(t *testing.T) {
	d := incident.NewDetector(2, time.Hour)
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d.Observe("first", "e1", t0)
	for i := range incident.MaxTracked {
		d.Observe(fmt.Sprint("fp", i), "e", t0.Add(time.Duration(i+1)*time.Millisecond))
	}
	require.False(t, d.Observe("first", "e2", t0.Add(time.Hour/2)), "the least recently failing fingerprint was forgotten")
	require.True(t, d.Observe(fmt.Sprint("fp", incident.MaxTracked-1), "e2", t0.Add(time.Hour/2)), "a recent one was kept")
}
