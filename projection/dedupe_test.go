package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

const horizon14d = 14 * 24 * time.Hour

// ledgerRowsOf counts the ledger rows of the events (fork "production")
// under any projection.
func (f *fixture) ledgerRowsOf(t testing.TB, eventIDs ...string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM causet_projection_applied a
WHERE a.key IN (SELECT causet_applied_key(a.projection, 'production', e) FROM unnest($1::text[]) e)`, eventIDs).Scan(&n))
	return n
}

// ledgerRow is one row of the dedupe ledger and the partition holding it.
type ledgerRow struct {
	Bucket     int32
	Partition  string
	Projection string
	IRVersion  int
	AppliedAt  time.Time
}

// ledger reads the whole dedupe ledger by key.
func (f *fixture) ledger(t testing.TB) map[string]ledgerRow {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT key::text, bucket, tableoid::regclass::text, projection, ir_version, applied_at
FROM causet_projection_applied`)
	require.NoError(t, err)
	out := map[string]ledgerRow{}
	for rows.Next() {
		var k string
		var r ledgerRow
		require.NoError(t, rows.Scan(&k, &r.Bucket, &r.Partition, &r.Projection, &r.IRVersion, &r.AppliedAt))
		r.AppliedAt = r.AppliedAt.UTC()
		_, dup := out[k]
		require.False(t, dup, "key %s recorded twice", k)
		out[k] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// hourPartitions lists the ledger's hour buckets that have partitions.
func (f *fixture) hourPartitions(t testing.TB) []int32 {
	t.Helper()
	hs, err := projection.DedupeHourPartitions(f.ctx, f.pool)
	require.NoError(t, err)
	return hs
}

func (f *fixture) maintain(t testing.TB, horizon time.Duration) (int, int64) {
	t.Helper()
	dropped, deleted, err := projection.MaintainDedupe(f.ctx, f.pool, horizon)
	require.NoError(t, err)
	return dropped, deleted
}

var (
	hourOf      = projection.DedupeHour
	hourStart   = projection.DedupeHourStart
	partitionOf = projection.DedupePartition
)

func hours(from, to int32) []int32 {
	var out []int32
	for h := from; h <= to; h++ {
		out = append(out, h)
	}
	return out
}

// playedAt is a TRACK_PLAYED of one play for the artist named like the
// event, at occurredAt (zero: none).
func playedAt(id string, occurredAt time.Time) event.Envelope {
	ev := played(id, "artist-"+id, 1, 1)
	ev.OccurredAt = occurredAt
	return ev
}

func statsKey(ev event.Envelope) string {
	return projection.DedupeKey("artist_stats", ev.ForkID, ev.EventID).String()
}

// requireStatuses applies evs as one batch and checks each result's status.
func (f *fixture) requireStatuses(t testing.TB, evs []event.Envelope, want ...projection.Status) []projection.Result {
	t.Helper()
	res, err := f.engine.ApplyBatch(f.ctx, evs)
	require.NoError(t, err)
	require.Len(t, res, len(want))
	for i, r := range res {
		require.Equal(t, want[i], r.Status, "%s: %v", r.EventID, r.Err)
	}
	return res
}

// The migration computes keys in SQL, the engine in Go: they must agree,
// and no two triples may share one.
func TestDedupeKeyMatchesSQL(t *testing.T) {
	f := setup(t)
	inputs := [][3]string{
		{"artist_stats", "production", "e-1"},
		{"artist_stats", "production", "e-2"},
		{"artist_stats", "staging", "e-1"},
		{"artist_followers", "production", "e-1"},
		// The same characters, split differently.
		{"ab", "c", "d"},
		{"a", "bc", "d"},
		{"a", "b", "cd"},
		{"abc", "", "d"},
		{"", "abc", "d"},
		{"", "", "abcd"},
		{"a1:b", "c", "d"},
		{"a", "1:bc", "d"},
		// Non-ASCII: lengths are bytes, not characters.
		{"artist_stats", "prodüction", "事件-1"},
		{"üa", "b", "c"},
		{"ü", "ab", "c"},
		{"ü", "é", "🎵"},
		{"", "", ""},
	}
	seen := map[string][3]string{}
	for _, in := range inputs {
		goKey := projection.DedupeKey(in[0], in[1], in[2])
		var sqlKey string
		require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT causet_applied_key($1, $2, $3)::text", in[0], in[1], in[2]).Scan(&sqlKey))
		require.Equal(t, goKey.String(), sqlKey, "%q", in)
		require.Equal(t, goKey, projection.DedupeKey(in[0], in[1], in[2]))
		prev, dup := seen[sqlKey]
		require.False(t, dup, "%q and %q share a key", prev, in)
		seen[sqlKey] = in
	}
}

// Where each event is recorded, and that a redelivery of each is a
// duplicate that changes nothing.
func TestDedupeRoutesByOccurredAt(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	f.maintain(t, horizon14d)

	now := time.Now().UTC()
	evs := []event.Envelope{
		playedAt("now", now),
		playedAt("13-days-ago", now.Add(-13*24*time.Hour)),
		playedAt("none", time.Time{}),
		playedAt("30-days-ago", now.Add(-30*24*time.Hour)),
		playedAt("5-days-ahead", now.Add(5*24*time.Hour)),
	}
	want := map[string]int32{
		statsKey(evs[0]): hourOf(evs[0].OccurredAt),
		statsKey(evs[1]): hourOf(evs[1].OccurredAt),
		statsKey(evs[2]): 0,
		statsKey(evs[3]): 0,
		statsKey(evs[4]): 0,
	}
	applied := projection.StatusApplied
	f.requireStatuses(t, evs, applied, applied, applied, applied, applied)

	ledger := f.ledger(t)
	require.Len(t, ledger, len(evs))
	for k, bucket := range want {
		r, ok := ledger[k]
		require.True(t, ok, "no row for %s", k)
		require.Equal(t, bucket, r.Bucket, k)
		require.Equal(t, partitionOf(bucket), r.Partition, k)
		require.Equal(t, "artist_stats", r.Projection)
		require.Equal(t, 1, r.IRVersion)
	}

	// Redelivered one by one, then all in one batch, twice.
	for _, ev := range evs {
		res := f.apply(t, "artist_stats", ev)
		require.Equal(t, projection.StatusDuplicate, res.Status, ev.EventID)
		require.Nil(t, res.Err)
	}
	dup := projection.StatusDuplicate
	f.requireStatuses(t, append(evs, evs...), dup, dup, dup, dup, dup, dup, dup, dup, dup, dup)

	require.Equal(t, ledger, f.ledger(t), "a duplicate changes no ledger row")
	for _, ev := range evs {
		plays, _ := f.stats(t, "artist-"+ev.EventID)
		require.EqualValues(t, 1, plays, ev.EventID)
	}
}

// An event recorded in bucket 0 while its hour was outside the window stays
// a duplicate once the window includes its hour: the insert probes bucket 0.
func TestDedupeBucketZeroStaysDuplicateWhenTheWindowMoves(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")

	// Never maintained: the window is empty.
	st, err := projection.ReadDedupeStats(f.ctx, f.pool)
	require.NoError(t, err)
	require.Zero(t, st.Partitions)
	require.Equal(t, st.From, st.To)

	now := time.Now().UTC()
	ev := playedAt("early", now)
	ahead := playedAt("ahead", now.Add(projection.DedupeAhead+3*time.Hour)) // beyond the hours that will exist
	f.requireStatuses(t, []event.Envelope{ev, ahead}, projection.StatusApplied, projection.StatusApplied)
	ledger := f.ledger(t)
	require.Equal(t, int32(0), ledger[statsKey(ev)].Bucket)
	require.Equal(t, int32(0), ledger[statsKey(ahead)].Bucket)

	f.maintain(t, horizon14d)
	st, err = projection.ReadDedupeStats(f.ctx, f.pool)
	require.NoError(t, err)
	h := hourOf(ev.OccurredAt)
	require.Contains(t, f.hourPartitions(t), h)
	require.False(t, hourStart(h).Before(st.From), "window %v..%v", st.From, st.To)
	require.True(t, hourStart(h).Before(st.To), "window %v..%v", st.From, st.To)

	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", ev).Status)
	f.requireStatuses(t, []event.Envelope{ev, ev}, projection.StatusDuplicate, projection.StatusDuplicate)
	require.Equal(t, ledger, f.ledger(t), "nothing recorded in the hour partition")
	plays, _ := f.stats(t, "artist-early")
	require.EqualValues(t, 1, plays)

	// The same for the event ahead once its hour is inside the window, as
	// maintenance a few hours later leaves it: the hours up to it have
	// partitions and the window reaches it.
	ha, hi := hourOf(ahead.OccurredAt), hourOf(st.To)-1
	require.Greater(t, ha, hi)
	for h := hi + 1; h <= ha; h++ {
		_, err = f.pool.Exec(f.ctx, fmt.Sprintf("CREATE TABLE %s PARTITION OF causet_projection_applied FOR VALUES IN (%d)", partitionOf(h), h))
		require.NoError(t, err)
	}
	_, err = f.pool.Exec(f.ctx, "UPDATE causet_projection_dedupe SET hi = $1", ha)
	require.NoError(t, err)
	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", ahead).Status)
	require.Equal(t, ledger, f.ledger(t))
	plays, _ = f.stats(t, "artist-ahead")
	require.EqualValues(t, 1, plays)

	// A new event of that hour is recorded in its partition.
	later := playedAt("ahead-2", ahead.OccurredAt)
	requireApplied(t, f.apply(t, "artist_stats", later))
	require.Equal(t, partitionOf(ha), f.ledger(t)[statsKey(later)].Partition)
}

// Maintenance at a shorter horizon drops the hour partitions older than it
// plus the grace, keeps the rest, and prunes bucket 0 by applied_at.
func TestMaintainDedupeDropsOldHoursAndPrunesBucketZero(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	dropped, deleted := f.maintain(t, horizon14d)
	require.Zero(t, dropped)
	require.Zero(t, deleted)
	st0, err := projection.ReadDedupeStats(f.ctx, f.pool)
	require.NoError(t, err)
	t0 := st0.MaintainedAt
	first, last := hourOf(t0.Add(-horizon14d)), hourOf(t0.Add(projection.DedupeAhead))
	require.Equal(t, hours(first, last), f.hourPartitions(t))
	require.Equal(t, horizon14d, st0.Horizon)
	require.Equal(t, hourStart(first), st0.From)
	require.Equal(t, hourStart(last+1), st0.To)

	now := time.Now().UTC()
	old := playedAt("10-days-ago", now.Add(-10*24*time.Hour))
	kept := playedAt("30-hours-ago", now.Add(-30*time.Hour)) // past the new horizon, within its grace
	recent := playedAt("now", now)
	stale := playedAt("none-stale", time.Time{})
	fresh := playedAt("none-fresh", time.Time{})
	oldFresh := playedAt("30-days-ago", now.Add(-30*24*time.Hour)) // bucket 0, applied just now
	applied := projection.StatusApplied
	f.requireStatuses(t, []event.Envelope{old, kept, recent, stale, fresh, oldFresh}, applied, applied, applied, applied, applied, applied)
	before := f.ledger(t)
	require.Equal(t, partitionOf(hourOf(old.OccurredAt)), before[statsKey(old)].Partition)
	require.Equal(t, partitionOf(hourOf(kept.OccurredAt)), before[statsKey(kept)].Partition)
	tag, err := f.pool.Exec(f.ctx, "UPDATE causet_projection_applied SET applied_at = now() - interval '3 hours' WHERE bucket = 0 AND key = $1", statsKey(stale))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	const short = 2 * time.Hour
	dropped, deleted = f.maintain(t, short)
	st, err := projection.ReadDedupeStats(f.ctx, f.pool)
	require.NoError(t, err)
	t1 := st.MaintainedAt
	dropBelow, lo, hi := hourOf(t1.Add(-short-projection.DedupeGrace)), hourOf(t1.Add(-short)), hourOf(t1.Add(projection.DedupeAhead))
	require.Equal(t, hours(dropBelow, hi), f.hourPartitions(t), "older hours dropped, the grace and the window kept")
	require.Equal(t, int(dropBelow-first), dropped)
	require.EqualValues(t, 1, deleted, "only the bucket-0 row applied before the horizon")

	after := f.ledger(t)
	require.Len(t, after, 4)
	for _, ev := range []event.Envelope{kept, recent, fresh, oldFresh} {
		require.Equal(t, before[statsKey(ev)], after[statsKey(ev)], ev.EventID)
	}

	require.Equal(t, short, st.Horizon)
	require.Equal(t, hourStart(lo), st.From)
	require.Equal(t, hourStart(hi+1), st.To)
	require.Equal(t, int(hi-dropBelow+1), st.Partitions)
	require.Positive(t, st.Bytes)
	require.Equal(t, hourStart(dropBelow), st.OldestHour)
	require.Equal(t, earliest(after[statsKey(fresh)].AppliedAt, after[statsKey(oldFresh)].AppliedAt), st.OldestUnbucketed)
	require.Equal(t, st.OldestHour, st.Oldest())
	require.WithinDuration(t, time.Now(), t1, time.Minute)

	// Within the shorter horizon a redelivery is still a duplicate.
	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", recent).Status)
	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", fresh).Status)
	plays, _ := f.stats(t, "artist-now")
	require.EqualValues(t, 1, plays)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// legacyLedgerDDL is the unpartitioned ledger of the earlier release.
const legacyLedgerDDL = `CREATE TABLE causet_projection_applied (projection text NOT NULL, fork_id text NOT NULL, event_id text NOT NULL, ir_version int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (projection, fork_id, event_id));`

// ledgerSchema describes the ledger's relations, their identity included,
// and its routing window.
func (f *fixture) ledgerSchema(t testing.TB) string {
	t.Helper()
	var s string
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT
	(SELECT string_agg(c.relname || ':' || c.oid || ':' || c.relkind::text, ',' ORDER BY c.relname)
		FROM pg_class c WHERE c.relname LIKE 'causet\_projection\_%' AND c.relnamespace = 'public'::regnamespace)
	|| ' ' || (SELECT string_agg(p.oid::text, ',') FROM pg_proc p WHERE p.proname = 'causet_applied_key')
	|| ' ' || (SELECT concat_ws(',', lo, hi, horizon, maintained_at) FROM causet_projection_dedupe)`).Scan(&s))
	return s
}

// The unpartitioned ledger of the first release moves into bucket 0 when
// schema migration 1 adopts its database, and its events stay duplicates
// wherever they are routed now.
func TestDedupeMigratesTheUnpartitionedLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testenv.EmptyPostgres(t) // as the first release left it
	statsDDL, err := exampleprojections.DDL("artist_stats")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, legacyLedgerDDL+statsDDL)
	require.NoError(t, err)

	// What the earlier release recorded, and the read model it wrote.
	legacy := []struct {
		projection, fork, eventID string
		irVersion                 int
		age                       time.Duration
	}{
		{"artist_stats", "production", "m-1", 1, time.Hour},
		{"artist_stats", "production", "m-2", 1, 2 * time.Hour},
		{"artist_stats", "prodüction", "m-ü-事件", 3, 3 * time.Hour},
		{"artist_followers", "production", "m-1", 2, 4 * time.Hour},
	}
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	want := map[string]ledgerRow{}
	for _, l := range legacy {
		at := dbNow.Add(-l.age).UTC().Truncate(time.Microsecond)
		_, err := pool.Exec(ctx, `INSERT INTO causet_projection_applied (projection, fork_id, event_id, ir_version, applied_at) VALUES ($1, $2, $3, $4, $5)`,
			l.projection, l.fork, l.eventID, l.irVersion, at)
		require.NoError(t, err)
		want[projection.DedupeKey(l.projection, l.fork, l.eventID).String()] = ledgerRow{Bucket: 0, Partition: partitionOf(0),
			Projection: l.projection, IRVersion: l.irVersion, AppliedAt: at}
	}
	_, err = pool.Exec(ctx, `INSERT INTO artist_stats (artist_id, plays) VALUES ('artist-m-1', 1), ('artist-m-2', 1), ('artist-m-ü-事件', 1)`)
	require.NoError(t, err)
	_, err = schema.Up(ctx, pool, nil)
	require.NoError(t, err)
	f := &fixture{ctx: ctx, pool: pool}
	var relkind string
	require.NoError(t, pool.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = 'causet_projection_applied'::regclass").Scan(&relkind))
	require.Equal(t, "p", relkind, "the ledger is partitioned now")
	require.Zero(t, f.count(t, "SELECT count(*) FROM pg_class WHERE relname LIKE '%legacy%'"), "the legacy table and its index are gone")
	require.Equal(t, want, f.ledger(t), "the legacy rows are in bucket 0 under their keys")

	// Again: nothing is pending, nothing changes.
	ledgerSchema := f.ledgerSchema(t)
	applied, err := schema.Up(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, applied)
	require.Equal(t, ledgerSchema, f.ledgerSchema(t))
	require.Equal(t, want, f.ledger(t))

	f.engine, err = projection.NewEngine(ctx, pool, nil)
	require.NoError(t, err)
	t.Cleanup(f.engine.Close)
	f.deploy(t, "artist_stats")
	f.maintain(t, horizon14d)

	// The migrated events, redelivered with an occurredAt routed to an hour
	// partition, are duplicates.
	now := time.Now().UTC()
	m1, m2, mu := played("m-1", "artist-m-1", 1, 1), played("m-2", "artist-m-2", 1, 1), played("m-ü-事件", "artist-m-ü-事件", 1, 1)
	mu.ForkID = "prodüction"
	for _, ev := range []*event.Envelope{&m1, &m2, &mu} {
		ev.OccurredAt = now
	}
	dup := projection.StatusDuplicate
	f.requireStatuses(t, []event.Envelope{m1, m2, mu}, dup, dup, dup)
	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", m1).Status)
	require.Equal(t, want, f.ledger(t))
	for _, a := range []string{"artist-m-1", "artist-m-2", "artist-m-ü-事件"} {
		plays, _ := f.stats(t, a)
		require.EqualValues(t, 1, plays, a)
	}

	// A new event applies, in its hour partition.
	n1 := played("n-1", "artist-m-1", 1, 1)
	n1.OccurredAt = now
	requireApplied(t, f.apply(t, "artist_stats", n1))
	require.Equal(t, partitionOf(hourOf(now)), f.ledger(t)[statsKey(n1)].Partition)
	plays, _ := f.stats(t, "artist-m-1")
	require.EqualValues(t, 2, plays)
}

// Pairs that fail to evaluate lose the ledger rows the round inserted for
// them, in whichever bucket each landed; the others keep theirs.
func TestBatchPrefailUndoesItsLedgerRowsPerBucket(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	f.maintain(t, horizon14d)

	now := time.Now().UTC()
	a, b := now, now.Add(-3*time.Hour)
	bad := func(ev event.Envelope) event.Envelope {
		ev.Payload = []byte(fmt.Sprintf(`{"artistId":%q,"plays":1,"days":0}`, "artist-"+ev.EventID)) // division by zero
		return ev
	}
	prev := playedAt("prev-a", a)
	requireApplied(t, f.apply(t, "artist_stats", prev))

	evs := []event.Envelope{
		playedAt("ok-a", a),
		bad(playedAt("bad-a", a)),
		playedAt("ok-b", b),
		bad(playedAt("bad-b", b)),
		bad(playedAt("bad-a2", a)),
		bad(playedAt("bad-none", time.Time{})),
		playedAt("ok-none", time.Time{}),
		bad(prev),                                           // applied before: a duplicate, its row stays
		bad(playedAt("bad-old", now.Add(-30*24*time.Hour))), // an hour outside the window: routed to bucket 0
	}
	ok, failed, dup := projection.StatusApplied, projection.StatusFailed, projection.StatusDuplicate
	res := f.requireStatuses(t, evs, ok, failed, ok, failed, failed, failed, ok, dup, failed)
	for _, r := range res {
		if r.Status == failed {
			require.Equal(t, contract.KindIREval, r.Err.Kind, r.EventID)
		}
	}

	want := map[string]int32{
		statsKey(prev):   hourOf(a),
		statsKey(evs[0]): hourOf(a),
		statsKey(evs[2]): hourOf(b),
		statsKey(evs[6]): 0,
	}
	got := map[string]int32{}
	for k, r := range f.ledger(t) {
		got[k] = r.Bucket
		require.Equal(t, partitionOf(r.Bucket), r.Partition)
	}
	require.Equal(t, want, got)

	// Nothing remembers the failed pairs: fixed, they apply.
	var fixed []event.Envelope
	for _, id := range []string{"bad-a", "bad-b", "bad-a2", "bad-none", "bad-old"} {
		for _, ev := range evs {
			if ev.EventID == id {
				ev.Payload = []byte(fmt.Sprintf(`{"artistId":%q,"plays":1,"days":1}`, "artist-"+id))
				fixed = append(fixed, ev)
			}
		}
	}
	f.requireStatuses(t, fixed, ok, ok, ok, ok, ok)
	for _, id := range []string{"prev-a", "ok-a", "ok-b", "ok-none", "bad-a", "bad-b", "bad-a2", "bad-none", "bad-old"} {
		plays, _ := f.stats(t, "artist-"+id)
		require.EqualValues(t, 1, plays, id)
	}
}

// The SQL key counts bytes of the UTF-8 encoding, as Go does, whatever the
// database's own encoding: a LATIN1 database gives the same keys.
func TestDedupeKeyInALatin1Database(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testenv.Postgres(t)
	name := fmt.Sprintf("latin1_key_%d", time.Now().UnixNano())
	_, err := pool.Exec(ctx, "CREATE DATABASE "+name+" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") })
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Database = name
	cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8" // as app.OpenPool sets it
	lp, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer lp.Close()
	_, err = schema.Up(ctx, lp, nil)
	require.NoError(t, err)
	for _, in := range [][3]string{{"artist_stats", "prodüction", "e-1"}, {"ä", "b", "c"}, {"a", "äb", "c"}} {
		var k string
		require.NoError(t, lp.QueryRow(ctx, "SELECT causet_applied_key($1, $2, $3)::text", in[0], in[1], in[2]).Scan(&k))
		require.Equal(t, projection.DedupeKey(in[0], in[1], in[2]).String(), k, "%q", in)
	}
}

// A fresh ledger's hour partitions (385 at the default horizon) are
// created a day per transaction, not in one that would hold a lock on each
// of them: the creating transactions, read from each partition's catalog
// row (xmin), create at most 24 each.
func TestMaintainDedupeCreatesHoursADayPerTransaction(t *testing.T) {
	f := setup(t, "artist_stats")
	f.maintain(t, projection.DefaultDedupeHorizon)
	rows, err := f.pool.Query(f.ctx, `SELECT count(*) FROM pg_class
WHERE relname ~ '^causet_projection_applied_h[0-9]+$' GROUP BY xmin::text`)
	require.NoError(t, err)
	perTx, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	total := 0
	for _, n := range perTx {
		require.LessOrEqual(t, n, 24, "partitions created by one transaction")
		total += n
	}
	require.Len(t, f.hourPartitions(t), total)
	require.GreaterOrEqual(t, total, int((projection.DefaultDedupeHorizon+projection.DedupeAhead)/projection.DedupeBucket))
	require.GreaterOrEqual(t, len(perTx), (total+23)/24)
	dropped, _ := f.maintain(t, projection.DefaultDedupeHorizon)
	require.Zero(t, dropped, "a second run drops nothing")
	require.Len(t, f.hourPartitions(t), total, "and creates nothing")
}

// A long reader of the ledger (a pg_dump holds ACCESS SHARE on every
// partition for its whole run) while maintenance creates and drops hour
// partitions: applies keep flowing, maintenance leaves what it cannot lock
// for its next run, and finishes once the reader has gone.
func TestMaintainDedupeNeverBlocksAppliesBehindALongReader(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	f.maintain(t, horizon14d)
	// One hour ahead is missing (to be created), and a shorter horizon
	// expires the oldest days (to be dropped).
	ahead := f.hourPartitions(t)[len(f.hourPartitions(t))-1]
	_, err := f.pool.Exec(f.ctx, "DROP TABLE "+projection.DedupePartition(ahead))
	require.NoError(t, err)
	const short = 48 * time.Hour

	reader, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, reader.QueryRow(f.ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&n))

	done := make(chan error, 1)
	go func() {
		_, _, err := projection.MaintainDedupe(f.ctx, f.pool, short)
		done <- err
	}()
	// While the reader holds its locks and maintenance runs, every apply
	// goes through: before, the first DDL queued them all behind the reader.
	for i := range 20 {
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		res, err := f.engine.Apply(ctx, "artist_stats", playedAt(fmt.Sprintf("during-%d", i), time.Now()))
		cancel()
		require.NoError(t, err, "apply %d behind the long reader", i)
		requireApplied(t, res)
	}
	err = <-done
	require.Error(t, err, "the expired hours cannot be dropped while the reader holds them")
	require.Contains(t, err.Error(), "drop dedupe partition")
	require.Contains(t, f.hourPartitions(t), ahead, "the missing hour was created and attached despite the reader")

	require.NoError(t, reader.Rollback(f.ctx))
	f.maintain(t, short)
	st, err := projection.ReadDedupeStats(f.ctx, f.pool)
	require.NoError(t, err)
	dropBelow := hourOf(st.MaintainedAt.Add(-short - projection.DedupeGrace))
	require.Equal(t, hourStart(dropBelow), st.OldestHour, "the next run dropped what the reader held")
	var leftovers int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_class WHERE relname ~ '^causet_projection_applied_h[0-9]+$'
AND relkind = 'r' AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = pg_class.oid)`).Scan(&leftovers))
	require.Zero(t, leftovers, "no detached table left behind")
}
