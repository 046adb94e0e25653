package bench

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIntentSpec(t *testing.T) {
	const clients, perClient = 4, 3
	owner := map[string]int{}
	ids := map[string]bool{}
	seqs := map[string]int64{}
	follows := 0
	for c := range clients {
		for j := range 12 {
			s := spec("run-i0", clients, perClient, c, j)
			require.False(t, ids[s.id], "intent IDs are unique")
			ids[s.id] = true
			if o, ok := owner[s.entity]; ok {
				require.Equal(t, o, c, "an entity is written by one client only")
			}
			owner[s.entity] = c
			seqs[s.entity]++
			require.Equal(t, seqs[s.entity], s.seq, "a client's intents of one entity are numbered 1, 2, 3, …")
			switch s.typ {
			case "FollowArtist":
				follows++
				require.Equal(t, []string{"artistId"}, keys(s.payload))
			case "PlayTrack":
				require.Equal(t, []string{"artistId", "days", "plays", "trackId"}, keys(s.payload))
				require.GreaterOrEqual(t, s.payload["plays"], int64(1))
			default:
				t.Fatalf("intent type %s", s.typ)
			}
		}
	}
	require.Len(t, owner, clients*perClient)
	require.Equal(t, clients*12/followEvery, follows)
	require.Equal(t, intentSpec{id: "p-01-000005", typ: "PlayTrack", entity: "u-p-00009",
		payload: map[string]any{"artistId": "a-36", "trackId": "t-5", "plays": int64(1), "days": int64(1)}, seq: 2},
		spec("p", clients, perClient, 1, 5))
}

func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

func TestPercentile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	require.Equal(t, 50.0, percentile(xs, 0.5))
	require.Equal(t, 99.0, percentile(xs, 0.99))
	require.Equal(t, 100.0, percentile(xs, 1))
	require.Equal(t, 1.0, percentile(xs[:1], 0.99))
	require.Equal(t, 0.0, percentile(nil, 0.5))
}

func TestPhasesFromEnv(t *testing.T) {
	t.Setenv("CAUSET_BENCH_PHASES", "")
	p, err := phasesFromEnv()
	require.NoError(t, err)
	require.Nil(t, p, "unset: every phase")
	t.Setenv("CAUSET_BENCH_PHASES", " intents, ceiling,intents ")
	p, err = phasesFromEnv()
	require.NoError(t, err)
	require.Equal(t, []string{"ceiling", "intents"}, p, "in run order, once each")
	t.Setenv("CAUSET_BENCH_PHASES", "intents,relay")
	_, err = phasesFromEnv()
	require.EqualError(t, err, fmt.Sprintf(`CAUSET_BENCH_PHASES="intents,relay": unknown phase "relay" (want a comma-separated subset of %s)`,
		"ceiling, schedule, inline, ordering, history, peer, retrytopics, workflow, handoff, intents"))
}
