package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIntentsValidateExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/intents/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 3)
	stdout, stderr, code := runBinary(t, nil, append([]string{"intents", "validate"}, files...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "FollowArtist.yaml: ok (intent FollowArtist, 1 reads, 2 rules, emits ARTIST_FOLLOWED)")
	require.Contains(t, stdout, "PlayTrack.yaml: ok (intent PlayTrack, 0 reads, 3 rules, emits TRACK_PLAYED)")
	require.Contains(t, stdout, "UnfollowArtist.yaml: ok (intent UnfollowArtist, 1 reads, 2 rules, emits ARTIST_UNFOLLOWED)")
}

func TestIntentsValidateNamesEachFault(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`
intent_type: Bad
reads: {r: {table: t, key: {id: intent.entityId}}}
rules: [{name: a, reject_if: reads.nope == null, reason: "'x'"}]
emits: [{event_type: E, payload: {x: "intent.payload."}}]
`), 0o600))
	stdout, stderr, code := runBinary(t, nil, "intents", "validate", bad)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, bad+": invalid\n  rules[0].reject_if: reads.nope is not declared in reads\n  emits[0].payload.x: CEL: ")
	require.Equal(t, "causet: 1 of 1 intent handler documents are invalid", strings.TrimSpace(stderr))

	_, stderr, code = runBinary(t, []string{"DATABASE_URL=postgres://u@127.0.0.1:1/db"}, "intents", "deploy", bad)
	require.Equal(t, 1, code)
	require.Equal(t, "causet: 1 of 1 intent handler documents are invalid; nothing deployed", strings.TrimSpace(stderr))
}

func TestIntentsNeedDatabaseURL(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "intents", "list")
	require.Equal(t, 1, code)
	require.Equal(t, "causet: DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db", strings.TrimSpace(stderr))
}

func TestRuntimeRefusesBadEnv(t *testing.T) {
	const tokens = "CAUSET_RUNTIME_TOKENS=ops write,read 0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "causet: CAUSET_RUNTIME_TOKENS_FILE (or CAUSET_RUNTIME_TOKENS) is required"},
		{[]string{"CAUSET_RUNTIME_TOKENS=ops write short"}, "causet: CAUSET_RUNTIME_TOKENS: token ops is 5 characters, fewer than the 32 required"},
		{[]string{tokens}, "causet: DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db"},
		{[]string{"DATABASE_URL=postgres://u:secret@127.0.0.1:1/db", "CAUSET_RUNTIME_ADDR=8080"},
			`causet: CAUSET_RUNTIME_ADDR="8080" is invalid: want host:port, such as 127.0.0.1:8080`},
		{[]string{"DATABASE_URL=postgres://u:secret@127.0.0.1:1/db", "CAUSET_IR_COST_LIMIT=5", tokens},
			`causet: CAUSET_IR_COST_LIMIT="5" is invalid: want an integer from 1000 to 1000000000`},
	} {
		_, stderr, code := runBinary(t, tc.env, "runtime")
		require.Equal(t, 1, code)
		require.True(t, strings.HasPrefix(strings.TrimSpace(stderr), tc.want), stderr)
		require.Len(t, strings.Split(strings.TrimSpace(stderr), "\n"), 1, "one line: %q", stderr)
	}
	_, stderr, code := runBinary(t, []string{"DATABASE_URL=postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2", "CAUSET_RUNTIME_AUTH=none"}, "runtime")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "cannot reach PostgreSQL at 127.0.0.1:1")
	require.NotContains(t, stderr, "hunter2")
}
