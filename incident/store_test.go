package incident_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// An incident opens once; a releasing one is not opened again until it
// settles; moving its row moves the keys blocked behind it in the same
// transaction.
func TestStoreOpensOnceAndMovesItsKeys(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := incident.NewStore(pool)
	in := contract.IncidentInput{Projection: "p", Fingerprint: "00000000000000aa", Policy: "hold"}
	id := contract.IncidentWorkflowID("p", in.Fingerprint)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	holds, err := s.Open(ctx, tx, in)
	require.NoError(t, err)
	require.True(t, holds)
	key := parking.Key{Projection: "p", ForkID: "f", EntityID: "u1"}
	require.NoError(t, parking.Block(ctx, tx, "t", 0, []parking.Blocked{{Key: key, Head: id}}))
	_, err = parking.Park(ctx, tx, "t", 0, []contract.RetryInput{{Projection: "p", Event: event.Envelope{EventID: "e1", EntityID: "u1", ForkID: "f",
		EventType: "T", OccurredAt: time.Now().UTC(), Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	n, err := parking.Behind(ctx, pool, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	state := func() parking.HeadState {
		keys, err := parking.NewStore(pool).Load(ctx, "t", 0)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		return keys[0].State
	}
	require.Equal(t, parking.HeadActive, state(), "holding: the key waits")
	ok, err := s.SetState(ctx, id, contract.IncidentReleasing, contract.IncidentHolding)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, parking.HeadSettled, state(), "releasing: the key's parked events go")
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	holds, err = s.Open(ctx, tx, in)
	require.NoError(t, err)
	require.False(t, holds, "a releasing incident is not opened again")
	require.NoError(t, tx.Rollback(ctx))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Len(t, active, 1)
	require.Equal(t, contract.IncidentReleasing, active[0].State)

	ok, err = s.SetState(ctx, id, contract.IncidentResolved, contract.IncidentReleasing)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.SetState(ctx, id, contract.IncidentDeadLettered, contract.IncidentHolding)
	require.NoError(t, err)
	require.False(t, ok, "a resolved incident stays resolved")
	require.Equal(t, parking.HeadSettled, state(), "a settled head is never taken back")
}

// A run's last failure is matched to a holding incident of its projection
// by error kind and the pattern of its text (values stripped).
func TestHoldingForMatchesByKindAndPattern(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := incident.NewStore(pool)
	in := contract.IncidentInput{Projection: "p", Fingerprint: "00000000000000cd", ErrorKind: "sql",
		Pattern: incident.Pattern(`null value in column "email" violates not-null constraint, row 42`)}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.Open(ctx, tx, in)
		return err
	}))
	id := contract.IncidentWorkflowID("p", in.Fingerprint)
	for _, tc := range []struct {
		projection, kind, text, want string
	}{
		{"p", "sql", `null value in column "email" violates not-null constraint, row 7`, id},
		{"p", "ir_eval", `null value in column "email" violates not-null constraint, row 7`, ""},
		{"p", "sql", `null value in column "name" violates not-null constraint, row 7`, ""},
		{"q", "sql", `null value in column "email" violates not-null constraint, row 7`, ""},
	} {
		got, err := s.HoldingFor(ctx, tc.projection, tc.kind, tc.text)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%+v", tc)
	}
	ok, err := s.SetState(ctx, id, contract.IncidentReleasing, contract.IncidentHolding)
	require.NoError(t, err)
	require.True(t, ok)
	got, err := s.HoldingFor(ctx, "p", "sql", `null value in column "email" violates not-null constraint, row 7`)
	require.NoError(t, err)
	require.Empty(t, got, "only a holding incident takes runs")
}

// An incident ID is one hold at a time: a row dead-lettering its held
// events does not reopen until its run moves it to dead_lettered, and
// that move is a compare-and-set, so a hold opened after it is never
// dead-lettered by the earlier run. A reopen starts a new hold (opened now,
// counts from zero); opening a row that holds keeps its opening time (the
// hold's deadline) and counts.
func TestStoreReopensOnlyAnEndedHold(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := incident.NewStore(pool)
	in := contract.IncidentInput{Projection: "p", Fingerprint: "00000000000000ef", Policy: "hold"}
	id := contract.IncidentWorkflowID("p", in.Fingerprint)
	open := func() bool {
		t.Helper()
		var holds bool
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			holds, err = s.Open(ctx, tx, in)
			return err
		}))
		return holds
	}
	row := func() incident.Row {
		t.Helper()
		r, found, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
		return r
	}
	require.True(t, open())
	require.NoError(t, s.AddCounts(ctx, id, 20, 35))
	first := row()
	require.Equal(t, 20, first.EventsAffected)
	require.Equal(t, 35, first.EventsHeld)
	time.Sleep(10 * time.Millisecond)
	require.True(t, open(), "opened again while it holds: the same hold")
	again := row()
	require.True(t, again.OpenedAt.Equal(first.OpenedAt), "the hold's deadline does not move")
	require.Equal(t, 35, again.EventsHeld, "nor do its counts")

	ok, err := s.SetState(ctx, id, contract.IncidentDeadLettering, contract.IncidentHolding)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, open(), "not reopened while its run dead-letters the held events")
	require.NoError(t, s.AddCounts(ctx, id, 5, 5))
	require.Equal(t, 35, row().EventsHeld, "a dead-lettering hold counts no more")
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Len(t, active, 1, "a dead-lettering row has a run to keep alive")
	require.Equal(t, contract.IncidentDeadLettering, active[0].State)
	require.Equal(t, 35, active[0].RestartInput(time.Now()).Status.EventsHeld)

	ok, err = s.SetState(ctx, id, contract.IncidentDeadLettered, contract.IncidentDeadLettering)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, open(), "an ended hold reopens: a new hold")
	reopened := row()
	require.Equal(t, contract.IncidentHolding, reopened.State)
	require.True(t, reopened.OpenedAt.After(first.OpenedAt), "a new hold opens now")
	require.Zero(t, reopened.EventsHeld, "and counts from zero")
	ok, err = s.SetState(ctx, id, contract.IncidentDeadLettered, contract.IncidentDeadLettering)
	require.NoError(t, err)
	require.False(t, ok, "the earlier run's move (sent again) does not dead-letter the new hold")
	require.Equal(t, contract.IncidentHolding, row().State)
}
