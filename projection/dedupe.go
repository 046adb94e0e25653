package projection

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/catalog"
)

// The dedupe ledger, causet_projection_applied, remembers which (projection,
// fork, event) pairs were applied, so that a redelivered or re-sent event is
// applied at most once. It is bounded by a horizon, and its cost per event
// does not grow with history:
//
//   - A row is a 16-byte key (DedupeKey: SHA-256 of the projection, fork and
//     event IDs, truncated), the hour bucket it lives in, the projection, the
//     IR version and the time it was applied.
//   - The table is partitioned by bucket: one partition per hour of the
//     events' occurredAt, so an event always lands in the same partition and
//     an insert only touches the index of its own hour. Older hours are
//     never read again; history costs nothing per event.
//   - Bucket 0 ("unbucketed") holds events without occurredAt, events whose
//     occurredAt is outside the window [now − horizon, now + DedupeAhead]
//     when they are applied, and rows migrated from the unpartitioned
//     ledger. Every insert also probes it, so an event is found whichever
//     of the two it was recorded in.
//   - MaintainDedupe creates the hours ahead, moves the window, drops hour
//     partitions older than the horizon plus DedupeGrace (a DROP, not row
//     deletes) and deletes bucket-0 rows applied before the horizon.
//
// A duplicate — a delivery of the same envelope: same eventId, same
// occurredAt, as Kafka redeliveries, relay re-sends and replays are — is
// therefore applied at most once while its first application is within the
// horizon: for an event with occurredAt, while occurredAt is less than the
// horizon old; for one without, for the horizon after it was applied. (A
// producer that rebuilds an event with a new occurredAt under the same
// eventId makes another hour's row; CONTRACT §5 asks producers not to.) The horizon (CAUSET_DEDUPE_HORIZON) must cover the DLQ replay
// window and the events topic's retention.

// DefaultDedupeHorizon is the default horizon: two weeks, twice Kafka's
// default retention and the default DLQ replay window, so a consumer group
// reset to the start of the topic or a late replay still finds the events
// applied before.
const DefaultDedupeHorizon = 14 * 24 * time.Hour

const (
	// DedupeBucket is the span of one partition of the ledger.
	DedupeBucket = time.Hour
	// DedupeAhead is how far ahead of now hour partitions exist: an event
	// whose occurredAt is further in the future is recorded in bucket 0.
	DedupeAhead = 48 * time.Hour
	// DedupeGrace is how long past the horizon an hour partition is kept
	// before it is dropped, so no insert that read an older window can
	// reach a dropped partition.
	DedupeGrace = 48 * time.Hour
)

// dedupeLockKey serializes maintenance (with schemaLockKey's class).
const dedupeLockKey int64 = 0x63617573_65740002 // "caus" "et" 2

// DedupeKey is the ledger's key of (projection, fork, event): the first 16
// bytes of the SHA-256 of the three, length-prefixed so no two triples
// share an input. causet_applied_key(projection, fork_id, event_id) computes
// the same in SQL.
func DedupeKey(projection, fork, eventID string) uuid.UUID {
	h := sha256.New()
	for _, s := range []string{projection, fork} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	h.Write([]byte(eventID))
	var k uuid.UUID
	copy(k[:], h.Sum(nil))
	return k
}

// dedupeBucket is the hour bucket of an event: hours since the Unix epoch of
// its occurredAt, 0 without one (the insert also routes a bucket outside
// the window to 0).
func dedupeBucket(ev *event.Envelope) int32 {
	if ev.OccurredAt.IsZero() || ev.OccurredAt.Unix() < int64(DedupeBucket/time.Second) {
		return 0
	}
	return DedupeHour(ev.OccurredAt)
}

// DedupeHour is the hour bucket of t: hours since the Unix epoch.
func DedupeHour(t time.Time) int32 { return int32(t.Unix() / int64(DedupeBucket/time.Second)) }

// ledgerInsertSQL records a round's pairs in the dedupe ledger: keys ($1),
// hour buckets ($2, routed to 0 outside the window), projections ($3) and
// IR versions ($4). The keys it returns are new, to be written; the others
// were applied before: duplicates.
const ledgerInsertSQL = `INSERT INTO causet_projection_applied (key, bucket, projection, ir_version)
SELECT k.key, CASE WHEN k.bucket BETWEEN d.lo AND d.hi THEN k.bucket ELSE 0 END, k.projection, k.ir_version
FROM unnest($1::uuid[], $2::int[], $3::text[], $4::int[]) AS k(key, bucket, projection, ir_version)
LEFT JOIN causet_projection_dedupe d ON true
WHERE NOT EXISTS (SELECT 1 FROM causet_projection_applied u WHERE u.bucket = 0 AND u.key = k.key)
ON CONFLICT DO NOTHING
RETURNING key, bucket::text`

// ledgerUndoSQL removes ledger rows of one bucket ($1) this transaction
// inserted for pairs that then could not be written (CEL or statement
// failure); one statement per bucket, so only that partition is touched.
const ledgerUndoSQL = `DELETE FROM causet_projection_applied WHERE bucket = $1 AND key = ANY($2::uuid[])`

// DedupeStats describes the dedupe ledger.
type DedupeStats struct {
	// Horizon is the horizon of the last maintenance.
	Horizon time.Duration
	// From and To bound the hours of occurredAt recorded in hour
	// partitions; events outside are recorded in bucket 0.
	From, To time.Time
	// MaintainedAt is when maintenance last ran.
	MaintainedAt time.Time
	// Partitions counts the hour partitions.
	Partitions int
	// Bytes is the ledger's size on disk: tables and indexes.
	Bytes int64
	// OldestHour is the start of the oldest hour partition (zero if none).
	OldestHour time.Time
	// UnbucketedRows estimates bucket 0's rows (the planner's count), and
	// OldestUnbucketed is the oldest applied_at in it (zero if empty).
	UnbucketedRows   int64
	OldestUnbucketed time.Time
}

// Oldest is the oldest entry the ledger may hold: the older of its oldest
// hour partition and its oldest bucket-0 row.
func (s DedupeStats) Oldest() time.Time {
	switch {
	case s.OldestHour.IsZero():
		return s.OldestUnbucketed
	case s.OldestUnbucketed.IsZero() || s.OldestHour.Before(s.OldestUnbucketed):
		return s.OldestHour
	}
	return s.OldestUnbucketed
}

// DedupeHourStart is the start of hour bucket h.
func DedupeHourStart(h int32) time.Time {
	return time.Unix(int64(h)*int64(DedupeBucket/time.Second), 0).UTC()
}

// DedupePartition is the table of hour bucket h (bucket 0: the unbucketed
// partition).
func DedupePartition(h int32) string {
	if h == 0 {
		return "causet_projection_applied_unbucketed"
	}
	return "causet_projection_applied_h" + strconv.Itoa(int(h))
}

// dedupeHoursPerTx is how many hour partitions one transaction creates or
// drops: a fresh ledger needs horizon/1h + DedupeAhead/1h of them (385 at
// the default horizon), and a transaction holds a lock on every table it
// creates until it ends, so creating them all at once would need about
// 1,500 locks of max_locks_per_transaction's shared table. A day's worth is
// about a hundred.
const dedupeHoursPerTx = 24

// MaintainDedupe keeps the dedupe ledger within horizon at now (the
// database's clock): it creates the hour partitions up to DedupeAhead (a
// day of them per transaction), then moves the routing window to
// [now − horizon, now + DedupeAhead], then drops hour partitions older than
// horizon + DedupeGrace (a day per transaction); last it deletes bucket-0 rows applied
// more than horizon ago (in chunks of 10,000 rows per statement, so no
// statement holds many row locks). Each transaction holds the maintenance
// lock, so concurrent callers take turns, and the window only ever names
// hours whose partitions exist. It returns the partitions dropped and the
// rows deleted.
func MaintainDedupe(ctx context.Context, pool *pgxpool.Pool, horizon time.Duration) (dropped int, deleted int64, err error) {
	if horizon < DedupeBucket {
		return 0, 0, fmt.Errorf("dedupe horizon %s is shorter than one bucket (%s)", horizon, DedupeBucket)
	}
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return 0, 0, fmt.Errorf("maintain the dedupe ledger: %w", err)
	}
	lo, hi := DedupeHour(now.Add(-horizon)), DedupeHour(now.Add(DedupeAhead))
	existing, err := DedupeHourPartitions(ctx, pool)
	if err != nil {
		return 0, 0, fmt.Errorf("maintain the dedupe ledger: %w", err)
	}
	missing := missingHours(existing, lo, hi)
	if _, err := eachHourLocked(ctx, pool, missing, "create", createHour); err != nil {
		return 0, 0, fmt.Errorf("maintain the dedupe ledger: %w", err)
	}
	var expired []int32
	err = underMaintenanceLock(ctx, pool, func(tx pgx.Tx) error {
		// Under the lock: the partitions as they are now, not as listed
		// before (another maintainer with a shorter horizon may have dropped
		// some). The window must not name an hour without its partition.
		current, err := DedupeHourPartitions(ctx, tx)
		if err != nil {
			return err
		}
		if gone := missingHours(current, lo, hi); len(gone) > 0 {
			return fmt.Errorf("dedupe partition for %s is missing (dropped by another maintainer?); the window stays where it was", DedupeHourStart(gone[0]).Format(time.RFC3339))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO causet_projection_dedupe (id, lo, hi, horizon, maintained_at) VALUES (true, $1, $2, $3, now())
ON CONFLICT (id) DO UPDATE SET lo = EXCLUDED.lo, hi = EXCLUDED.hi, horizon = EXCLUDED.horizon, maintained_at = EXCLUDED.maintained_at`,
			lo, hi, horizon); err != nil {
			return err
		}
		dropBelow := DedupeHour(now.Add(-horizon - DedupeGrace))
		detached, err := detachedHours(ctx, tx)
		if err != nil {
			return err
		}
		for _, h := range append(current, detached...) {
			if h < dropBelow {
				expired = append(expired, h)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("maintain the dedupe ledger: %w", err)
	}
	// The window has moved past the expired hours: detach and drop them.
	dropped, err = dropHours(ctx, pool, expired)
	if err != nil {
		return dropped, 0, fmt.Errorf("maintain the dedupe ledger: %w", err)
	}
	// Bucket 0 is pruned row by row, outside the maintenance transaction,
	// in chunks.
	for {
		tag, err := pool.Exec(ctx, `DELETE FROM causet_projection_applied_unbucketed WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM causet_projection_applied_unbucketed WHERE applied_at < now() - $1::interval LIMIT 10000))`, horizon)
		if err != nil {
			return dropped, deleted, fmt.Errorf("prune the dedupe ledger's bucket 0: %w", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < 10000 {
			return dropped, deleted, nil
		}
	}
}

// missingHours are the hours of [lo, hi] not in have.
func missingHours(have []int32, lo, hi int32) []int32 {
	set := make(map[int32]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	var out []int32
	for h := lo; h <= hi; h++ {
		if !set[h] {
			out = append(out, h)
		}
	}
	return out
}

// Partition DDL must never hold up an apply. Applies insert into the
// ledger's parent (ROW EXCLUSIVE); CREATE TABLE … PARTITION OF and DROP
// TABLE of a partition want ACCESS EXCLUSIVE on it, and a DDL waiting
// behind a long reader (a pg_dump) queues every insert behind itself. So a
// new hour is created as a table of its own and attached (SHARE UPDATE
// EXCLUSIVE on the parent, which neither inserts nor readers conflict
// with), an expired one is detached concurrently before it is dropped, and
// every DDL gives up after dedupeLockTimeout (the next run tries again: the
// hours are made a day ahead and dropped two days late).
const (
	dedupeLockTimeout   = "2s"
	dedupeDetachTimeout = "30s"
)

// underMaintenanceLock runs fn in a transaction that holds the dedupe
// maintenance lock, so concurrent maintainers take turns.
func underMaintenanceLock(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", dedupeLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+dedupeLockTimeout+"'"); err != nil {
			return err
		}
		return fn(tx)
	})
}

// UnderDedupeMaintenance runs fn in a transaction that holds the dedupe
// maintenance lock, with the maintenance's lock timeout: a change to the
// ledger's partitions made by hand then takes turns with every maintainer
// instead of racing its DDL (two DDLs on the parent can deadlock), and gives
// up rather than queue applies behind it.
func UnderDedupeMaintenance(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return underMaintenanceLock(ctx, pool, fn)
}

// eachHourLocked runs do for each of hours, dedupeHoursPerTx of them per
// transaction under the maintenance lock (what: "create", for the error).
// It returns how many hours' transactions committed.
func eachHourLocked(ctx context.Context, pool *pgxpool.Pool, hours []int32, what string, do func(context.Context, pgx.Tx, int32) error) (int, error) {
	done := 0
	for len(hours) > 0 {
		chunk := hours[:min(dedupeHoursPerTx, len(hours))]
		hours = hours[len(chunk):]
		if err := underMaintenanceLock(ctx, pool, func(tx pgx.Tx) error {
			for _, h := range chunk {
				if err := do(ctx, tx, h); err != nil {
					return fmt.Errorf("%s dedupe partition for %s: %w", what, DedupeHourStart(h).Format(time.RFC3339), err)
				}
			}
			return nil
		}); err != nil {
			return done, err
		}
		done += len(chunk)
	}
	return done, nil
}

// createHour creates hour h's partition, as a table of its own attached to
// the ledger (IF NOT EXISTS and the attachment check: another maintainer
// may have made it since the listing).
func createHour(ctx context.Context, tx pgx.Tx, h int32) error {
	name := pgx.Identifier{DedupePartition(h)}.Sanitize()
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+name+" (LIKE causet_projection_applied INCLUDING DEFAULTS)"); err != nil {
		return err
	}
	var attached bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = $1::regclass)`, DedupePartition(h)).Scan(&attached); err != nil {
		return err
	}
	if attached {
		return nil
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE causet_projection_applied ATTACH PARTITION %s FOR VALUES IN (%d)", name, h))
	return err
}

// detachedHours are hours whose partition was detached, or left pending
// detachment, by a maintenance run that did not finish: they are dropped
// with the expired ones.
func detachedHours(ctx context.Context, q catalog.Querier) ([]int32, error) {
	rows, err := q.Query(ctx, `SELECT substring(c.relname FROM '^causet_projection_applied_h([0-9]+)$')::int
FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^causet_projection_applied_h[0-9]+$'
AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid AND NOT i.inhdetachpending)
ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// dropHours detaches (concurrently: it waits for older transactions, not
// for locks that inserts hold) and drops the partitions of hours, under
// the maintenance lock held by a session of its own, since DETACH
// CONCURRENTLY runs outside a transaction. An hour whose detachment or drop
// times out is left for the next run. It returns how many it dropped.
func dropHours(ctx context.Context, pool *pgxpool.Pool, hours []int32) (int, error) {
	if len(hours) == 0 {
		return 0, nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", dedupeLockKey); err != nil {
		return 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(rctx, "SELECT pg_advisory_unlock($1); RESET lock_timeout; RESET statement_timeout", dedupeLockKey); err != nil {
			conn.Hijack().Close(rctx) // a session that may still hold the lock is not pooled again
		}
	}()
	if _, err := conn.Exec(ctx, "SET lock_timeout = '"+dedupeLockTimeout+"'; SET statement_timeout = '"+dedupeDetachTimeout+"'"); err != nil {
		return 0, err
	}
	dropped := 0
	for _, h := range hours {
		name := pgx.Identifier{DedupePartition(h)}.Sanitize()
		var state string
		if err := conn.QueryRow(ctx, `SELECT CASE WHEN i.inhrelid IS NULL THEN 'detached' WHEN i.inhdetachpending THEN 'pending' ELSE 'attached' END
FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid WHERE c.oid = to_regclass($1)`, DedupePartition(h)).Scan(&state); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				continue // dropped by another maintainer
			}
			return dropped, err
		}
		stmts := map[string][]string{
			"attached": {"ALTER TABLE causet_projection_applied DETACH PARTITION " + name + " CONCURRENTLY"},
			"pending":  {"ALTER TABLE causet_projection_applied DETACH PARTITION " + name + " FINALIZE"},
		}[state]
		for _, stmt := range append(stmts, "DROP TABLE IF EXISTS "+name) {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return dropped, fmt.Errorf("drop dedupe partition for %s (%s): %w", DedupeHourStart(h).Format(time.RFC3339), stmt, err)
			}
		}
		dropped++
	}
	return dropped, nil
}

// DedupeHourPartitions lists the hour buckets that have partitions, in order.
func DedupeHourPartitions(ctx context.Context, q catalog.Querier) ([]int32, error) {
	rows, err := q.Query(ctx, `SELECT substring(c.relname FROM '^causet_projection_applied_h([0-9]+)$')::int
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'causet_projection_applied'::regclass AND c.relname ~ '^causet_projection_applied_h[0-9]+$'
ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// ReadDedupeStats reads the ledger's size and bounds. The schema must exist.
func ReadDedupeStats(ctx context.Context, pool *pgxpool.Pool) (DedupeStats, error) {
	var s DedupeStats
	var lo, hi int32
	var horizon time.Duration
	err := pool.QueryRow(ctx, `SELECT lo, hi, horizon, maintained_at FROM causet_projection_dedupe`).Scan(&lo, &hi, &horizon, &s.MaintainedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return s, fmt.Errorf("read the dedupe ledger's window: %w", err)
	default:
		s.Horizon, s.From, s.To = horizon, DedupeHourStart(lo), DedupeHourStart(hi+1)
	}
	hours, err := DedupeHourPartitions(ctx, pool)
	if err != nil {
		return s, fmt.Errorf("list the dedupe ledger's partitions: %w", err)
	}
	s.Partitions = len(hours)
	if len(hours) > 0 {
		s.OldestHour = DedupeHourStart(hours[0])
	}
	var oldest *time.Time
	err = pool.QueryRow(ctx, `SELECT
	(SELECT COALESCE(sum(pg_total_relation_size(relid)), 0)::bigint FROM pg_partition_tree('causet_projection_applied')),
	(SELECT GREATEST(reltuples, 0)::bigint FROM pg_class WHERE oid = 'causet_projection_applied_unbucketed'::regclass),
	(SELECT applied_at FROM causet_projection_applied_unbucketed ORDER BY applied_at LIMIT 1)`).Scan(&s.Bytes, &s.UnbucketedRows, &oldest)
	if err != nil {
		return s, fmt.Errorf("measure the dedupe ledger: %w", err)
	}
	if oldest != nil {
		s.OldestUnbucketed = oldest.UTC()
	}
	return s, nil
}

// WasApplied reports, read in q, whether the dedupe ledger records ev as
// applied to projection: the proof a head's event needs before its key is
// released without a dead letter.
func WasApplied(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, projection string, ev event.Envelope) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM causet_projection_applied WHERE bucket IN ($2, 0) AND key = $1)`,
		DedupeKey(projection, ev.ForkID, ev.EventID), dedupeBucket(&ev)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read the dedupe ledger for event %s: %w", ev.EventID, err)
	}
	return ok, nil
}
