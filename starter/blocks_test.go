package starter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// TestPostgresBlockStoreHeads: a key blocked before heads were recorded
// has none, heads round-trip, a re-blocked key takes its new head,
// and Remove clears the key.
func TestPostgresBlockStoreHeads(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	_, err := pool.Exec(ctx, `INSERT INTO causet_blocked_keys (topic, partition, projection, fork_id, entity_id) VALUES ('t', 0, 'p', 'f', 'old')`)
	require.NoError(t, err)

	s := NewPostgresBlockStore(pool)
	keys, err := s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.Equal(t, []BlockedKey{{LaneKey: LaneKey{"p", "f", "old"}}}, keys, "a key blocked before heads has none")

	a, b := LaneKey{"p", "f", "a"}, LaneKey{"p", "f", "b"}
	require.NoError(t, s.Add(ctx, nil, "t", 0, []BlockedKey{{LaneKey: a, Head: "projection-retry:p:f:e1"}, {LaneKey: b}}))
	require.NoError(t, s.Add(ctx, nil, "t", 1, []BlockedKey{{LaneKey: a, Head: "other-partition"}}))
	require.NoError(t, s.Add(ctx, nil, "t", 0, []BlockedKey{{LaneKey: a, Head: "projection-retry:p:f:e7"}}))
	keys, err = s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.ElementsMatch(t, []BlockedKey{
		{LaneKey: LaneKey{"p", "f", "old"}},
		{LaneKey: a, Head: "projection-retry:p:f:e7"},
		{LaneKey: b},
	}, keys)

	require.NoError(t, s.Remove(ctx, nil, "t", 0, a))
	keys, err = s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.ElementsMatch(t, []BlockedKey{{LaneKey: LaneKey{"p", "f", "old"}}, {LaneKey: b}}, keys)
	keys, err = s.Load(ctx, "t", 1)
	require.NoError(t, err)
	require.Equal(t, []BlockedKey{{LaneKey: a, Head: "other-partition"}}, keys)
}
