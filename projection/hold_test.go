package projection_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

func TestApplyBatchHold(t *testing.T) {
	f := setup(t, "artist_stats", "artist_followers")
	f.deploy(t, "artist_stats")
	f.deploy(t, "artist_followers")

	evs := []event.Envelope{
		played("h-1", "artist-1", 1, 1),
		played("h-2", "artist-2", 2, 1),
		followed("h-3", "user-1", "artist-1"),
		played("h-4", "artist-1", 4, 1),
	}
	hold := func(projection string, ev *event.Envelope) bool {
		return projection == "artist_stats" && ev.EventID != "h-2"
	}
	var seen []projection.Result
	res, err := f.engine.ApplyBatch(f.ctx, evs, projection.ApplyOptions{
		Hold: hold,
		BeforeCommit: func(_ context.Context, _ pgx.Tx, r []projection.Result) error {
			seen = r
			return nil
		},
	})
	require.NoError(t, err)
	require.Equal(t, res, seen)
	got := map[string]projection.Status{}
	for _, r := range res {
		got[r.EventID] = r.Status
	}
	require.Equal(t, map[string]projection.Status{
		"h-1": projection.StatusHeld, "h-2": projection.StatusApplied,
		"h-3": projection.StatusApplied, "h-4": projection.StatusHeld,
	}, got)
	plays, _ := f.stats(t, "artist-2")
	require.EqualValues(t, 2, plays)
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM artist_stats WHERE artist_id = 'artist-1'`).Scan(&n))
	require.Zero(t, n, "held pairs are not applied")
	require.Zero(t, f.ledgerRowsOf(t, "h-1", "h-4"), "held pairs get no ledger row")

	// A held pair is applied normally later; a rolled-back batch keeps its
	// held pairs held.
	boom := errors.New("boom")
	res, err = f.engine.ApplyBatch(f.ctx, evs, projection.ApplyOptions{
		Hold:         hold,
		BeforeCommit: func(context.Context, pgx.Tx, []projection.Result) error { return boom },
	})
	require.ErrorIs(t, err, boom)
	for _, r := range res {
		if r.EventID == "h-1" || r.EventID == "h-4" {
			require.Equal(t, projection.StatusHeld, r.Status)
		} else {
			require.Equal(t, projection.StatusFailed, r.Status)
		}
	}
	res, err = f.engine.ApplyBatch(f.ctx, evs)
	require.NoError(t, err)
	for _, r := range res {
		want := projection.StatusDuplicate
		if r.EventID == "h-1" || r.EventID == "h-4" {
			want = projection.StatusApplied
		}
		require.Equal(t, want, r.Status, r.EventID)
	}
	plays, _ = f.stats(t, "artist-1")
	require.EqualValues(t, 5, plays)
}

// A write that fails at execution as the batch's last pair must not leave
// the transaction aborted (BeforeCommit statements and the commit follow).
func TestApplyBatchLastPairFailsAtExecution(t *testing.T) {
	f := setup(t, "artist_stats", `CREATE FUNCTION no_x() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.artist_id = 'x' THEN RAISE EXCEPTION 'no x'; END IF; RETURN NEW; END $$;
CREATE TRIGGER no_x BEFORE INSERT ON artist_stats FOR EACH ROW EXECUTE FUNCTION no_x();`)
	f.deploy(t, "artist_stats")
	res, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{played("l-1", "a", 1, 1), played("l-2", "x", 1, 1)},
		projection.ApplyOptions{BeforeCommit: func(ctx context.Context, tx pgx.Tx, _ []projection.Result) error {
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		}})
	require.NoError(t, err)
	require.Equal(t, projection.StatusApplied, res[0].Status)
	require.Equal(t, projection.StatusFailed, res[1].Status)
	plays, _ := f.stats(t, "a")
	require.EqualValues(t, 1, plays)
}

// With HoldAfterFailure, a pair that fails (in evaluation, or at execution)
// holds the later pairs of its (projection, fork, entity): they get no
// write and no ledger row, while earlier pairs of the key and other keys
// apply.
func TestApplyBatchHoldAfterFailure(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	_, err := f.pool.Exec(f.ctx, `ALTER TABLE artist_stats ADD CONSTRAINT plays_bound CHECK (plays < 1000)`)
	require.NoError(t, err)
	entity := func(ev event.Envelope, e string) event.Envelope { ev.EntityID = e; return ev }
	evs := []event.Envelope{
		entity(played("a-1", "artist-a", 1, 1), "user-a"),
		entity(played("a-2", "artist-a", 1, 0), "user-a"), // division by zero: fails in evaluation
		entity(played("a-3", "artist-a", 1, 1), "user-a"),
		entity(played("b-1", "artist-b", 1, 1), "user-b"),
		entity(played("b-2", "artist-b", 5000, 1), "user-b"), // breaks the CHECK: fails at execution
		entity(played("b-3", "artist-b", 1, 1), "user-b"),
		entity(played("c-1", "artist-c", 1, 1), "user-c"),
	}
	res, err := f.engine.ApplyBatch(f.ctx, evs, projection.ApplyOptions{HoldAfterFailure: true})
	require.NoError(t, err)
	got := map[string]projection.Status{}
	for _, r := range res {
		got[r.EventID] = r.Status
	}
	require.Equal(t, map[string]projection.Status{
		"a-1": projection.StatusApplied, "a-2": projection.StatusFailed, "a-3": projection.StatusHeld,
		"b-1": projection.StatusApplied, "b-2": projection.StatusFailed, "b-3": projection.StatusHeld,
		"c-1": projection.StatusApplied,
	}, got)
	require.Zero(t, f.ledgerRowsOf(t, "a-2", "a-3", "b-2", "b-3"), "failed and held pairs have no ledger row")
	for artist, want := range map[string]int64{"artist-a": 1, "artist-b": 1, "artist-c": 1} {
		plays, _ := f.stats(t, artist)
		require.Equal(t, want, plays, artist)
	}

	// Without it the later pairs apply.
	evs2 := []event.Envelope{
		entity(played("d-1", "artist-d", 1, 0), "user-d"),
		entity(played("d-2", "artist-d", 1, 1), "user-d"),
	}
	res, err = f.engine.ApplyBatch(f.ctx, evs2)
	require.NoError(t, err)
	require.Equal(t, projection.StatusFailed, res[0].Status)
	require.Equal(t, projection.StatusApplied, res[1].Status)
}
