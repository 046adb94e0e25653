package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestOutboxListsAndRedrivesSetAsideEvents(t *testing.T) {
	url := testenv.PostgresURL(t)
	env := []string{"DATABASE_URL=" + url}
	stdout, stderr, code := runBinary(t, env, "outbox", "list")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "no events set aside\n", stdout)
	_, stderr, code = runBinary(t, env, "outbox", "redrive")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "name the events to send again, or --all")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	for i, id := range []string{"i-1:1", "i-2:1"} {
		_, err := pool.Exec(ctx, `INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response)
VALUES ($1, 'Big', 'user-1', 'production', 'succeeded', 1, '{}')`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope)
VALUES ($1, 'production', 'user-1', $2, 'BIG', $1, '{"eventId": "x", "payload": {}}')`, id, i+1)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO causet_events_set_aside (position, event_id, reason)
SELECT position, event_id, 'MESSAGE_TOO_LARGE: The request included a message larger than the max message size' FROM causet_events WHERE event_id = $1`, id)
		require.NoError(t, err)
	}

	stdout, stderr, code = runBinary(t, env, "outbox", "list")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	require.Regexp(t, `^POSITION +EVENT +TYPE +FORK +ENTITY +BYTES +SET ASIDE +REASON$`, lines[0])
	require.Regexp(t, `^\d+ +i-1:1 +BIG +production +user-1 +\d+ +\S+ +MESSAGE_TOO_LARGE`, lines[1])

	stdout, stderr, code = runBinary(t, env, "outbox", "list", "--json", "--limit", "1")
	require.Equal(t, 0, code, stderr)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &e))
	require.Equal(t, "i-1:1", e["eventId"])

	stdout, stderr, code = runBinary(t, env, "outbox", "redrive", "i-1:1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "1 events back in the outbox")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM causet_events_set_aside`).Scan(&n))
	require.Equal(t, 1, n)
	stdout, stderr, code = runBinary(t, env, "outbox", "redrive", "--all")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "1 events back in the outbox")
}
