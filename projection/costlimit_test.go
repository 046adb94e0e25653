package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

const scansDDL = `CREATE TABLE scans (id text PRIMARY KEY, n bigint)`

// nestedScan is a nested comprehension: over the ~500-byte payload of
// scan(id, 245) it runs for seconds without a cost limit.
const nestedScan = "event.payload.items.map(a, event.payload.items.map(b, event.payload.items.filter(c, a + b + c > 100).size())).size()"

// endlessScan nests one level deeper: minutes without a limit.
const endlessScan = "event.payload.items.all(a, event.payload.items.all(b, event.payload.items.all(c, event.payload.items.all(d, a + b + c + d >= 0)))) ? 1 : 0"

func scansDoc(expr string) *projection.Document {
	return &projection.Document{Name: "scans", SourceEvents: []string{"SCAN"}, Table: "scans", Key: []string{"id"},
		On: map[string]projection.Operation{"SCAN": {Op: projection.OpUpsert, Columns: map[string]string{"id": "event.entityId", "n": expr}}}}
}

// scan is a SCAN event whose payload lists n one-digit items.
func scan(id string, n int) event.Envelope {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i % 10)
	}
	return event.Envelope{EventID: id, EventType: "SCAN", EntityID: id, ForkID: "production",
		Payload: []byte(`{"items":[` + strings.Join(items, ",") + `]}`)}
}

// deployUnchecked stores doc as the next version without validating it, as a
// deploy made before expressions were checked for cost did.
func (f *fixture) deployUnchecked(t testing.TB, doc *projection.Document) {
	t.Helper()
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	err = pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(f.ctx, "UPDATE causet_projection_catalog SET version = version + 1"); err != nil {
			return err
		}
		_, err := tx.Exec(f.ctx, `INSERT INTO causet_projection_versions (name, version, document)
SELECT $1, COALESCE(max(version), 0) + 1, $2 FROM causet_projection_versions WHERE name = $1`, doc.Name, string(body))
		return err
	})
	require.NoError(t, err)
}

func (f *fixture) count(t testing.TB, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, sql).Scan(&n))
	return n
}

func TestCostLimitFailsOnlyTheEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []projection.Option
		want string
	}{
		{"default", nil, "on.SCAN.columns.n: CEL cost limit 1000000 exceeded"},
		{"configured", []projection.Option{projection.WithCostLimit(50_000)}, "on.SCAN.columns.n: CEL cost limit 50000 exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, "artist_followers", scansDDL)
			f.deploy(t, "artist_followers")
			engine, err := projection.NewEngine(f.ctx, f.pool, nil, tc.opts...)
			require.NoError(t, err)
			t.Cleanup(engine.Close)

			// Deploy refuses the expression...
			_, err = engine.Deploy(f.ctx, scansDoc(nestedScan))
			require.ErrorContains(t, err, "on.SCAN.columns.n: worst-case CEL cost is unbounded")
			// ...that an earlier deploy let through.
			f.deployUnchecked(t, scansDoc(nestedScan))

			runaway := scan("big", 245)
			require.Len(t, runaway.Payload, 501)
			evs := []event.Envelope{runaway, scan("small", 3), followed("a", "user-1", "artist-9")}
			start := time.Now()
			results, err := engine.ApplyBatch(f.ctx, evs)
			t.Logf("batch with a runaway expression applied in %v", time.Since(start))
			require.NoError(t, err)
			require.Len(t, results, 3)
			require.Equal(t, projection.StatusFailed, results[0].Status)
			require.Equal(t, contract.KindIREval, results[0].Err.Kind)
			require.Equal(t, contract.KindIREval, projection.Classify(results[0].Err))
			require.EqualError(t, results[0].Err, tc.want)
			for _, r := range results[1:] {
				require.Equal(t, projection.StatusApplied, r.Status, r.EventID)
			}
			require.Equal(t, 1, f.count(t, "SELECT count(*) FROM scans WHERE id = 'small' AND n = 3"))
			require.Equal(t, 0, f.count(t, "SELECT count(*) FROM scans WHERE id = 'big'"))
			require.Len(t, f.followers(t), 1)
			// No ledger row: the event may apply once the expression is fixed.
			require.Zero(t, f.ledgerRowsOf(t, "big"))
		})
	}
}

func TestApplyStopsWhenContextEnds(t *testing.T) {
	f := setup(t, "artist_followers", scansDDL)
	f.deploy(t, "artist_followers")
	// No practical cost limit: only the context stops the evaluation.
	engine, err := projection.NewEngine(f.ctx, f.pool, nil, projection.WithCostLimit(math.MaxUint64))
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	f.deployUnchecked(t, scansDoc(endlessScan))

	evs := []event.Envelope{followed("a", "user-1", "artist-9"), scan("big", 245), followed("b", "user-2", "artist-9")}
	ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	results, err := engine.ApplyBatch(ctx, evs)
	elapsed := time.Since(start)
	t.Logf("stopped %v after the start of the batch", elapsed)
	// Unstopped, the evaluation runs for minutes.
	require.Less(t, elapsed, 10*time.Second)
	require.Error(t, err)
	require.Equal(t, contract.KindConnection, projection.Classify(err))
	require.Len(t, results, 3)
	for _, r := range results {
		require.Equal(t, projection.StatusFailed, r.Status)
		require.Equal(t, contract.KindConnection, r.Err.Kind)
	}
	require.Empty(t, f.followers(t))
	require.Equal(t, 0, f.count(t, "SELECT count(*) FROM causet_projection_applied"))

	// The engine and its pool are fine afterwards.
	results, err = engine.ApplyBatch(f.ctx, []event.Envelope{followed("a", "user-1", "artist-9"), scan("small", 3)})
	require.NoError(t, err)
	require.Len(t, results, 2)
	for _, r := range results {
		require.Equal(t, projection.StatusApplied, r.Status, r.EventID)
	}
}
