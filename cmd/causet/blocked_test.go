package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

// causet blocked lists the blocked keys, those with the most parked events
// first, with their head and its state; --json for scripts.
func TestBlockedListsKeysWithTheirHeads(t *testing.T) {
	url := testenv.PostgresURL(t)
	env := []string{"DATABASE_URL=" + url}
	stdout, stderr, code := runBinary(t, env, "blocked")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "no blocked keys\n", stdout)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	a := parking.Key{Projection: "artist_followers", ForkID: "production", EntityID: "user-1"}
	b := parking.Key{Projection: "artist_stats", ForkID: "production", EntityID: "artist-2"}
	headA := contract.RetryWorkflowID(a.Projection, a.ForkID, "e-1")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := parking.Block(ctx, tx, "causet.events.v1", 2, []parking.Blocked{{Key: a, Head: headA}, {Key: b, Head: "projection-incident:artist_stats:00000000000000aa"}}); err != nil {
			return err
		}
		_, err := parking.Park(ctx, tx, "causet.events.v1", 2, []contract.RetryInput{
			{Projection: a.Projection, Event: event.Envelope{EventID: "e-2", EntityID: a.EntityID, ForkID: a.ForkID, EventType: "ARTIST_UNFOLLOWED", Payload: json.RawMessage(`{}`)}},
			{Projection: a.Projection, Event: event.Envelope{EventID: "e-3", EntityID: a.EntityID, ForkID: a.ForkID, EventType: "ARTIST_FOLLOWED", Payload: json.RawMessage(`{}`)}},
		})
		return err
	}))

	stdout, stderr, code = runBinary(t, env, "blocked")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	require.Regexp(t, `^PROJECTION +FORK +ENTITY +PARKED +HEAD +HEAD STATE +BLOCKED SINCE +PARTITION$`, lines[0])
	require.Regexp(t, `^artist_followers +production +user-1 +2 +`+headA+` +retrying +\S+ +causet\.events\.v1/2$`, lines[1], "the most parked events first")
	require.Regexp(t, `^artist_stats +production +artist-2 +0 +projection-incident:artist_stats:00000000000000aa +retrying `, lines[2])

	stdout, stderr, code = runBinary(t, env, "blocked", "--projection", "artist_stats", "--json")
	require.Equal(t, 0, code, stderr)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &row))
	require.Equal(t, "artist-2", row["entityId"])
	require.Equal(t, "projection-incident:artist_stats:00000000000000aa", row["head"])

	_, stderr, code = runBinary(t, env, "blocked", "--limit", "0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--limit=0 is invalid")
}
