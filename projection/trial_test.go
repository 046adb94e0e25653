package projection_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// candidate parses a variant of an example document.
func candidate(t *testing.T, example string, edit func(string) string) *projection.Document {
	t.Helper()
	doc, err := projection.Parse([]byte(edit(mustExample(t, example))))
	require.NoError(t, err)
	return doc
}

// A candidate that fixes the failure reports every event as applicable,
// one that does not reports the failure, and nothing is written either way.
func TestTryRollsBackAndReportsEachEvent(t *testing.T) {
	f := setup(t, testenv.FollowersNoFollowedAtDDL)
	f.deploy(t, "artist_followers")
	evs := []event.Envelope{followed("t1", "user-1", "artist-1"), followed("t2", "user-2", "artist-1"), unfollowed("t3", "user-3", "artist-1")}
	for _, ev := range evs[:2] {
		require.Equal(t, projection.StatusFailed, f.apply(t, "artist_followers", ev).Status, "the deployed version fails them")
	}

	fixed := candidate(t, "artist_followers", func(s string) string { return strings.Replace(s, "      followed_at: event.occurredAt\n", "", 1) })
	trials, err := f.engine.Try(f.ctx, fixed, evs)
	require.NoError(t, err)
	require.Len(t, trials, 3)
	for i, tr := range trials {
		require.Equal(t, evs[i].EventID, tr.EventID)
		require.Equal(t, i, tr.Index)
		require.Equal(t, projection.StatusApplied, tr.Status, "%s: %v", tr.EventID, tr.Err)
		require.Equal(t, 2, tr.IRVersion, "tried as the next version")
		require.Nil(t, tr.Later)
	}
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM artist_followers").Scan(&n))
	require.Zero(t, n, "nothing applied")
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&n))
	require.Zero(t, n, "no ledger row")
	require.Equal(t, 1, f.engine.Version("artist_followers"), "nothing deployed")

	same := candidate(t, "artist_followers", func(s string) string { return s })
	trials, err = f.engine.Try(f.ctx, same, evs)
	require.NoError(t, err)
	for _, tr := range trials[:2] {
		require.Equal(t, projection.StatusFailed, tr.Status)
		require.Equal(t, contract.KindSQL, tr.Err.Kind)
		require.Contains(t, tr.Err.Error(), `column "followed_at"`)
	}
	require.Equal(t, projection.StatusApplied, trials[2].Status, "an unfollow does not touch the column")

	// An invalid candidate is refused with Validate's error.
	broken := candidate(t, "artist_followers", func(s string) string { return s })
	broken.Table = ""
	_, err = f.engine.Try(f.ctx, broken, evs)
	var ve *projection.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, projection.Validate(broken).Error(), err.Error())
}

// Half right: events a fix covers apply, the others still fail with their
// own error; a skipped type and an applied-already event say so.
func TestTryHalfRightCandidate(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	requireApplied(t, f.apply(t, "artist_stats", played("ok", "artist-1", 2, 1)))
	// plays_per_day divides by days: 0 fails; the candidate guards 0 days but
	// not a missing field.
	guarded := candidate(t, "artist_stats", func(s string) string {
		return strings.Replace(s, "event.payload.plays / event.payload.days", `"event.payload.days == 0 ? 0 : event.payload.plays / event.payload.days"`, 1)
	})
	require.Contains(t, guarded.On["TRACK_PLAYED"].Columns["plays_per_day"], "== 0 ?", "the edit took")
	missing := played("no-days", "artist-2", 1, 1)
	missing.Payload = []byte(`{"artistId":"artist-2","plays":1}`)
	evs := []event.Envelope{played("zero", "artist-2", 3, 0), missing, played("ok", "artist-1", 2, 1), followed("other", "user-1", "artist-1")}
	trials, err := f.engine.Try(f.ctx, guarded, evs)
	require.NoError(t, err)
	require.Equal(t, projection.StatusApplied, trials[0].Status, "%v", trials[0].Err)
	require.Equal(t, projection.StatusFailed, trials[1].Status)
	require.Equal(t, contract.KindIREval, trials[1].Err.Kind)
	require.Contains(t, trials[1].Err.Error(), "no such key: days")
	require.Equal(t, projection.StatusDuplicate, trials[2].Status, "applied already")
	require.Equal(t, projection.StatusSkipped, trials[3].Status, "not a type of the candidate")
	plays, _ := f.stats(t, "artist-2")
	require.Zero(t, plays)
}

// An event older than one its entity applied would be refused as a replay.
func TestTryReportsOutOfOrder(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	newer := played("seq-5", "artist-1", 1, 1)
	newer.Sequence = 5
	requireApplied(t, f.apply(t, "artist_stats", newer))
	older := played("seq-3", "artist-1", 1, 0)
	older.Sequence = 3
	unordered := played("no-seq", "artist-1", 1, 0)
	doc := candidate(t, "artist_stats", func(s string) string { return s })
	trials, err := f.engine.Try(f.ctx, doc, []event.Envelope{older, unordered})
	require.NoError(t, err)
	require.NotNil(t, trials[0].Later)
	require.Equal(t, projection.Later{EventID: "seq-5", Sequence: 5}, *trials[0].Later)
	require.Nil(t, trials[1].Later, "an event without a sequence is never out of order")
}

// A batch larger than one transaction keeps input order and indexes.
func TestTryManyEventsInBatches(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	n := projection.DefaultTryBatch*2 + 7
	evs := make([]event.Envelope, n)
	for i := range evs {
		days := 1
		if i%3 == 0 {
			days = 0
		}
		evs[i] = played(fmt.Sprintf("m-%d", i), "artist-1", 1, days)
	}
	trials, err := f.engine.Try(f.ctx, candidate(t, "artist_stats", func(s string) string { return s }), evs)
	require.NoError(t, err)
	require.Len(t, trials, n)
	for i, tr := range trials {
		require.Equal(t, i, tr.Index)
		require.Equal(t, evs[i].EventID, tr.EventID)
		if i%3 == 0 {
			require.Equal(t, projection.StatusFailed, tr.Status)
		} else {
			require.Equal(t, projection.StatusApplied, tr.Status)
		}
	}
	plays, _ := f.stats(t, "artist-1")
	require.Zero(t, plays)
}
