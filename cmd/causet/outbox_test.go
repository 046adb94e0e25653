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

	// An event set aside while a later one of its entity was published: sent
	// now, it would come after it, so the redrive refuses it as a replay is
	// refused, unless forced with who and why.
	for i, id := range []string{"i-3:1", "i-4:1"} {
		_, err := pool.Exec(ctx, `INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response)
VALUES ($1, 'Big', 'user-2', 'production', 'succeeded', 1, '{}')`, id)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope, published_at)
VALUES ($1, 'production', 'user-2', $2, 'BIG', $1, '{"eventId": "x", "payload": {}}', CASE WHEN $3 THEN now() END)`, id, i+1, i == 1)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO causet_events_set_aside (position, event_id, reason)
SELECT position, event_id, 'MESSAGE_TOO_LARGE' FROM causet_events WHERE event_id = 'i-3:1'`)
	require.NoError(t, err)
	stdout, stderr, code = runBinary(t, env, "outbox", "redrive", "i-3:1")
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stdout, "0 events back in the outbox")
	require.Contains(t, stdout, "redrive refused: i-3:1 (sequence 1) would be sent after i-4:1 (sequence 2) of its entity")
	require.Contains(t, stderr, "1 events not redriven")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM causet_events_set_aside`).Scan(&n))
	require.Equal(t, 1, n, "a refused event stays set aside")
	_, stderr, code = runBinary(t, env, "outbox", "redrive", "--force", "i-3:1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--force needs --identity and --reason")
	stdout, stderr, code = runBinary(t, env, "outbox", "redrive", "--force", "--identity", "ops", "--reason", "read models rebuilt", "i-3:1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "1 events back in the outbox")
	require.Contains(t, stderr, "outbox_redrive_forced")
}
