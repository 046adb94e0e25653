package projection_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

const benchBatch = 500

// benchEvents returns batch i: benchBatch ARTIST_FOLLOWED events, each a new
// (user, artist) row, as a live stream would mostly bring.
func benchEvents(i int) []event.Envelope {
	evs := make([]event.Envelope, benchBatch)
	for j := range evs {
		n := i*benchBatch + j
		evs[j] = followed(fmt.Sprint("ev-", n), fmt.Sprint("user-", n), fmt.Sprint("artist-", n%97))
	}
	return evs
}

// BenchmarkApplyBatch: the engine, 500-event batches, dedupe ledger on.
func BenchmarkApplyBatch(b *testing.B) {
	f := setup(b, "artist_followers")
	f.deploy(b, "artist_followers")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		evs := benchEvents(i)
		b.StartTimer()
		results, err := f.engine.ApplyBatch(f.ctx, evs)
		if err != nil {
			b.Fatal(err)
		}
		if len(results) != benchBatch || results[benchBatch-1].Status != projection.StatusApplied {
			b.Fatalf("unexpected results: %d, last %+v", len(results), results[len(results)-1])
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRawBatchUpsert: the same rows as one pgx.Batch of upserts in one
// transaction, no dedupe, no CEL — the floor ApplyBatch is measured against.
func BenchmarkRawBatchUpsert(b *testing.B) {
	f := setup(b, "artist_followers")
	const upsert = `INSERT INTO artist_followers (user_id, artist_id, followed_at) VALUES ($1, $2, $3)
ON CONFLICT (user_id, artist_id) DO UPDATE SET followed_at = EXCLUDED.followed_at`
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		evs := benchEvents(i)
		b.StartTimer()
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			for _, ev := range evs {
				fields, err := ev.Fields()
				if err != nil {
					return err
				}
				artist := fields["payload"].(map[string]any)["artistId"]
				batch.Queue(upsert, ev.EntityID, artist, ev.OccurredAt)
			}
			return tx.SendBatch(f.ctx, batch).Close()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
	var n int
	require.NoError(b, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM artist_followers").Scan(&n))
	require.Equal(b, b.N*benchBatch, n)
}
