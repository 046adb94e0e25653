package projection_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// The sequence guard: a guarded apply of an event older than its entity's
// applied mark is refused (invalid_event, no write, no ledger row, the
// key's later pairs held); one applied before stays a duplicate; an
// unguarded (fresh) apply and events without a sequence are not checked.
func TestApplyGuardRefusesOlderSequences(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	seq := func(ev event.Envelope, n int64) event.Envelope { ev.Sequence = n; return ev }

	old := seq(followed("g-old", "user-1", "artist-1"), 1)
	_, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{old})
	require.NoError(t, err)
	later := seq(followed("g-later", "user-1", "artist-2"), 5)
	_, err = f.engine.ApplyBatch(f.ctx, []event.Envelope{later})
	require.NoError(t, err)

	older := seq(followed("g-older", "user-1", "artist-3"), 3)
	after := seq(followed("g-after", "user-1", "artist-4"), 6)
	other := seq(followed("g-other", "user-2", "artist-3"), 1)
	plain := followed("g-plain", "user-1", "artist-5")
	res, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{old, older, after, other, plain},
		projection.ApplyOptions{Guard: true, HoldAfterFailure: true})
	require.NoError(t, err)
	got := map[string]projection.Status{}
	for _, r := range res {
		got[r.EventID] = r.Status
		if r.EventID == "g-older" {
			var refused *projection.SequenceRefused
			require.True(t, errors.As(r.Err, &refused), "%v", r.Err)
			require.Equal(t, contract.KindInvalidEvent, projection.Classify(r.Err))
			require.EqualValues(t, 5, refused.Later.Sequence)
			require.Equal(t, "g-later", refused.Later.EventID)
			require.Contains(t, r.Err.Error(), "replay refused: artist_followers already applied a later event of entity user-1 (sequence 5, eventId g-later) than this one (sequence 3)")
		}
	}
	require.Equal(t, map[string]projection.Status{
		"g-old":   projection.StatusDuplicate, // applied before: not refused
		"g-older": projection.StatusFailed,
		"g-after": projection.StatusHeld, // after a failure of its key
		"g-other": projection.StatusApplied,
		"g-plain": projection.StatusHeld,
	}, got)
	require.Zero(t, f.ledgerRowsOf(t, "g-older"), "a refused pair leaves no ledger row")

	res, err = f.engine.ApplyBatch(f.ctx, []event.Envelope{older})
	require.NoError(t, err)
	require.Equal(t, projection.StatusApplied, res[0].Status, "a fresh apply is not guarded")
}

// The guard reads the marks before writing, without a lock. A later event
// of the entity applied by a transaction that commits meanwhile shows in the
// mark once the guarded transaction raises it: the apply runs again and is
// refused, instead of taking the read model back.
func TestApplyGuardRefusesWhatAConcurrentApplyMovedPast(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	seq := func(ev event.Envelope, n int64) event.Envelope { ev.Sequence = n; return ev }
	_, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{seq(followed("r-5", "user-r", "artist-1"), 5)})
	require.NoError(t, err)

	// Another apply of the entity's sequence 7 holds the mark's row.
	other, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(f.ctx) }()
	_, err = other.Exec(f.ctx, `UPDATE causet_applied_sequences SET sequence = 7, event_id = 'r-7' WHERE entity_id = 'user-r'`)
	require.NoError(t, err)

	type outcome struct {
		res []projection.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{seq(followed("r-6", "user-r", "artist-2"), 6)}, projection.ApplyOptions{Guard: true})
		done <- outcome{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // the guarded apply has read mark 5 and waits on the row
	require.NoError(t, other.Commit(f.ctx))
	got := <-done
	require.NoError(t, got.err)
	require.Len(t, got.res, 1)
	require.Equal(t, projection.StatusFailed, got.res[0].Status, "%+v", got.res[0])
	var refused *projection.SequenceRefused
	require.True(t, errors.As(got.res[0].Err, &refused), "%v", got.res[0].Err)
	require.EqualValues(t, 7, refused.Later.Sequence)
	require.Zero(t, f.ledgerRowsOf(t, "r-6"))
}
