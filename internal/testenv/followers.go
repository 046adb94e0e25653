package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// FollowersIR is the artist_followers projection of examples/projections.
// Its upsert writes followed_at, so against FollowersNoFollowedAtDDL every
// ARTIST_FOLLOWED fails as sql (the seed's schema mismatch) while
// ARTIST_UNFOLLOWED deletes fine.
const FollowersIR = `
name: artist_followers
source_events: [ARTIST_FOLLOWED, ARTIST_UNFOLLOWED]
table: artist_followers
key: [user_id, artist_id]
on:
  ARTIST_FOLLOWED:
    op: upsert
    columns: {user_id: event.entityId, artist_id: event.payload.artistId, followed_at: event.occurredAt}
  ARTIST_UNFOLLOWED:
    op: delete
    columns: {user_id: event.entityId, artist_id: event.payload.artistId}
`

// FollowersFixedIR is FollowersIR without the followed_at column: the fix
// that lets the dead-lettered events apply.
var FollowersFixedIR = strings.Replace(FollowersIR, ", followed_at: event.occurredAt", "", 1)

// FollowersNoFollowedAtDDL creates artist_followers without its followed_at
// column.
const FollowersNoFollowedAtDDL = `CREATE TABLE artist_followers (user_id text NOT NULL, artist_id text NOT NULL, PRIMARY KEY (user_id, artist_id))`

// Followers returns the rows of artist_followers as user/artist → followed_at
// (UTC).
func Followers(t testing.TB, ctx context.Context, pool *pgxpool.Pool) map[string]time.Time {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT user_id, artist_id, followed_at FROM artist_followers")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var u, a string
		var at time.Time
		require.NoError(t, rows.Scan(&u, &a, &at))
		out[u+"/"+a] = at.UTC()
	}
	require.NoError(t, rows.Err())
	return out
}
