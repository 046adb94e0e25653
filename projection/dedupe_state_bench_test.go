package projection

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/internal/testenv"
)

// BenchmarkDedupeState weighs the dedupe designs of docs/ARCHITECTURE.md by
// what each adds to a 500-event transaction of projection upserts, on one
// connection: nothing (no dedupe), the ledger's own insert (a row per
// event, this package's statement into its hour partition), a per-entity
// high-water mark (a row per distinct entity of the batch, at two entity
// counts), and Kafka offsets stored with the batch (a row per partition).
//
//	go test -run '^$' -bench BenchmarkDedupeState -benchtime 400x ./projection/
func BenchmarkDedupeState(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pool := testenv.Postgres(b)
	if _, _, err := MaintainDedupe(ctx, pool, 24*time.Hour); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
CREATE TABLE bench_rows (event_id text PRIMARY KEY, entity_id text NOT NULL, at timestamptz NOT NULL, v bigint NOT NULL);
CREATE TABLE bench_entity_hwm (projection text, fork_id text, entity_id text, sequence bigint NOT NULL, PRIMARY KEY (projection, fork_id, entity_id));
CREATE TABLE bench_offsets (grp text, topic text, part int, next_offset bigint NOT NULL, PRIMARY KEY (grp, topic, part));`); err != nil {
		b.Fatal(err)
	}
	const (
		upsert = `INSERT INTO bench_rows (event_id, entity_id, at, v) VALUES ($1, $2, $3, $4)
ON CONFLICT (event_id) DO UPDATE SET entity_id = excluded.entity_id, at = excluded.at, v = excluded.v`
		hwm = `INSERT INTO bench_entity_hwm (projection, fork_id, entity_id, sequence)
SELECT 'p', 'f', e, s FROM unnest($1::text[], $2::bigint[]) AS k(e, s)
ON CONFLICT (projection, fork_id, entity_id) DO UPDATE SET sequence = excluded.sequence
WHERE bench_entity_hwm.sequence < excluded.sequence`
		offsets = `INSERT INTO bench_offsets VALUES ('g', 't', 0, $1)
ON CONFLICT (grp, topic, part) DO UPDATE SET next_offset = excluded.next_offset`
	)
	at := time.Now()
	hour := DedupeHour(at)
	var run int
	bench := func(name string, extra func(batch *pgx.Batch, first int, ids []string)) {
		b.Run(name, func(b *testing.B) {
			run++
			ids := make([]string, 500)
			for i := 0; i < b.N; i++ {
				batch := &pgx.Batch{}
				first := i * len(ids)
				for j := range ids {
					ids[j] = fmt.Sprintf("r%d-%d", run, first+j)
					batch.Queue(upsert, ids[j], fmt.Sprint("e-", (first+j)%1000), at, int64(first+j))
				}
				if extra != nil {
					extra(batch, first, ids)
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "events/s")
		})
	}
	bench("none", nil)
	bench("ledger", func(batch *pgx.Batch, _ int, ids []string) {
		keys, buckets, projs, versions := make([]uuid.UUID, len(ids)), make([]int32, len(ids)), make([]string, len(ids)), make([]int32, len(ids))
		for j, id := range ids {
			keys[j], buckets[j], projs[j], versions[j] = DedupeKey("p", "f", id), hour, "p", 1
		}
		batch.Queue(ledgerInsertSQL, keys, buckets, projs, versions)
	})
	for _, entities := range []int{500, 50} {
		bench(fmt.Sprintf("entity-hwm/%d-entities-per-batch", entities), func(batch *pgx.Batch, first int, ids []string) {
			es, seqs := make([]string, entities), make([]int64, entities)
			for k := range es {
				es[k], seqs[k] = fmt.Sprint("e-", k), int64(first+len(ids)) // the batch's last sequence of each entity
			}
			batch.Queue(hwm, es, seqs)
		})
	}
	bench("offsets", func(batch *pgx.Batch, first int, ids []string) {
		batch.Queue(offsets, int64(first+len(ids)))
	})
}
