package projection_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// TestConcurrentBatchesOnSharedRowsDoNotDeadlock runs two batches at once
// that increment the same rows in opposite orders, as two partitions do when
// events of different entities count towards the same artist. Taking row
// locks in one order, no pair may fail with a deadlock.
func TestConcurrentBatchesOnSharedRowsDoNotDeadlock(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	const artists, rounds = 30, 8
	batch := func(round, side int) []event.Envelope {
		var evs []event.Envelope
		for i := range artists {
			a := i
			if side == 1 {
				a = artists - 1 - i
			}
			evs = append(evs, played(fmt.Sprintf("r%d-s%d-%d", round, side, i), fmt.Sprintf("artist-%02d", a), 1, 1))
		}
		return evs
	}
	for round := range rounds {
		var wg sync.WaitGroup
		results := make([][]projection.Result, 2)
		errs := make([]error, 2)
		for side := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[side], errs[side] = f.engine.ApplyBatch(f.ctx, batch(round, side))
			}()
		}
		wg.Wait()
		for side := range 2 {
			require.NoError(t, errs[side])
			for _, r := range results[side] {
				require.Nil(t, r.Err, "round %d side %d event %s", round, side, r.EventID)
				require.Equal(t, projection.StatusApplied, r.Status)
			}
		}
	}
	for i := range artists {
		plays, _ := f.stats(t, fmt.Sprintf("artist-%02d", i))
		require.EqualValues(t, 2*rounds, plays)
	}
}
