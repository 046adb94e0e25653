package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/projection"
)

// recordPage appends a page of a rollout's checked events to its affected
// set, numbered from after+1 in check order.
func recordPage(ctx context.Context, pool *pgxpool.Pool, rolloutID, proj string, after int, events []EventOutcome) error {
	rows := make([][]any, len(events))
	for i, e := range events {
		id := e.WorkflowID
		if e.Source != DeadLettered {
			// Parked, held, retrying: the event's own run, should it fail.
			id = retryID(proj, e)
		}
		var topic *string
		var part *int32
		var off *int64
		if e.Item != nil {
			topic, part, off = &e.Item.Topic, &e.Item.Partition, &e.Item.Offset
		}
		var seq *int64
		if e.Event.Sequence > 0 {
			seq = &e.Event.Sequence
		}
		rows[i] = []any{rolloutID, after + i + 1, string(e.Source), proj, e.Event.ForkID, e.Event.EventID,
			projection.DedupeKey(proj, e.Event.ForkID, e.Event.EventID), bucketOf(e), id, string(e.Outcome), topic, part, off,
			e.Event.EntityID, seq}
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"causet_rollout_events"},
		[]string{"rollout_id", "seq", "source", "projection", "fork_id", "event_id", "dedupe_key", "bucket", "workflow_id", "outcome",
			"dlq_topic", "dlq_partition", "dlq_offset", "entity_id", "sequence"}, pgx.CopyFromRows(rows))
	return err
}

// keepRecorded drops the rollout's recorded events past the first n (what
// a try of its check wrote after its last progress report) and returns the
// dedupe keys of the ones kept, so that a resumed check tries only the rest.
func keepRecorded(ctx context.Context, pool *pgxpool.Pool, rolloutID string, n int) (map[[16]byte]bool, error) {
	if _, err := pool.Exec(ctx, `DELETE FROM causet_rollout_events WHERE rollout_id = $1 AND seq > $2`, rolloutID, n); err != nil {
		return nil, fmt.Errorf("forget the rollout's events past %d: %w", n, err)
	}
	rows, err := pool.Query(ctx, `SELECT dedupe_key FROM causet_rollout_events WHERE rollout_id = $1`, rolloutID)
	if err != nil {
		return nil, fmt.Errorf("read the rollout's events: %w", err)
	}
	out := map[[16]byte]bool{}
	var k [16]byte
	if _, err := pgx.ForEachRow(rows, []any{&k}, func() error { out[k] = true; return nil }); err != nil {
		return nil, fmt.Errorf("read the rollout's events: %w", err)
	}
	return out, nil
}

// entityOrder sorts the dead letters of each entity that carry a sequence
// by it, each keeping the places its entity's dead letters had; every other
// event stays where it was. A rollout records its events in this order, so
// that its replays go in it.
func entityOrder(events []Failing) []Failing {
	type entity struct{ fork, id string }
	places := map[entity][]int{}
	for i, e := range events {
		if e.Source == DeadLettered && e.Event.Sequence > 0 {
			k := entity{e.Event.ForkID, e.Event.EntityID}
			places[k] = append(places[k], i)
		}
	}
	out := events
	for _, at := range places {
		if len(at) < 2 {
			continue
		}
		if &out[0] == &events[0] {
			out = slices.Clone(events)
		}
		evs := make([]Failing, len(at))
		for j, i := range at {
			evs[j] = events[i]
		}
		slices.SortStableFunc(evs, func(a, b Failing) int { return cmp.Compare(a.Event.Sequence, b.Event.Sequence) })
		for j, i := range at {
			out[i] = evs[j]
		}
	}
	return out
}

func bucketOf(e EventOutcome) int32 {
	if e.Event.OccurredAt.IsZero() {
		return 0
	}
	return projection.DedupeHour(e.Event.OccurredAt)
}

// replayRow is one dead letter of a rollout to replay.
type replayRow struct {
	seq        int
	workflowID string
	topic      *string
	partition  *int32
	offset     *int64
	// after is the run of its entity's dead letter replayed before it in
	// this rollout (nil: none): it is replayed once that one has settled.
	after *string
}

// replays returns the rollout's dead letters the check said would apply,
// after sequence after, at most n, in order, each with the run of its
// entity's previous one.
func replays(ctx context.Context, pool *pgxpool.Pool, rolloutID string, after, n int) ([]replayRow, error) {
	rows, err := pool.Query(ctx, `SELECT seq, workflow_id, dlq_topic, dlq_partition, dlq_offset, previous FROM (
	SELECT seq, workflow_id, dlq_topic, dlq_partition, dlq_offset,
		CASE WHEN sequence IS NOT NULL THEN lag(workflow_id) OVER (PARTITION BY fork_id, entity_id, sequence IS NULL ORDER BY seq) END AS previous
	FROM causet_rollout_events WHERE rollout_id = $1 AND source = $3 AND outcome = $4) r
WHERE seq > $2 ORDER BY seq LIMIT $5`,
		rolloutID, after, string(DeadLettered), string(WouldApply), n)
	if err != nil {
		return nil, fmt.Errorf("read the rollout's dead letters: %w", err)
	}
	var out []replayRow
	var r replayRow
	_, err = pgx.ForEachRow(rows, []any{&r.seq, &r.workflowID, &r.topic, &r.partition, &r.offset, &r.after}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the rollout's dead letters: %w", err)
	}
	return out, nil
}

// actedOn are the rollout's events the check said would apply: the ones
// it deploys and replays for.
type actedOn struct {
	workflowID string
	key        [16]byte
	bucket     int32
	// source is where the check found the event (a dead letter is
	// replayed by the batches).
	source Source
	entity entityRef
	// sequence is the event's within its entity (0: none).
	sequence int64
}

// entityRef is an event's entity (id "" when the event has none).
type entityRef struct{ fork, id string }

func readActedOn(ctx context.Context, pool *pgxpool.Pool, rolloutID string) ([]actedOn, error) {
	rows, err := pool.Query(ctx, `SELECT workflow_id, dedupe_key, bucket, source, fork_id, coalesce(entity_id, ''), coalesce(sequence, 0) FROM causet_rollout_events
WHERE rollout_id = $1 AND outcome = $2 ORDER BY seq`, rolloutID, string(WouldApply))
	if err != nil {
		return nil, fmt.Errorf("read the rollout's events: %w", err)
	}
	var out []actedOn
	var a actedOn
	var source string
	_, err = pgx.ForEachRow(rows, []any{&a.workflowID, &a.key, &a.bucket, &source, &a.entity.fork, &a.entity.id, &a.sequence}, func() error {
		a.source = Source(source)
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the rollout's events: %w", err)
	}
	return out, nil
}

// appliedKeys returns which of keys the dedupe ledger holds: one query per
// hour bucket (its own partition), and one for bucket 0, where the ledger
// puts events outside its window.
func appliedKeys(ctx context.Context, pool *pgxpool.Pool, evs []actedOn) (map[[16]byte]bool, error) {
	byBucket := map[int32][][16]byte{}
	var all [][16]byte
	for _, e := range evs {
		byBucket[e.bucket] = append(byBucket[e.bucket], e.key)
		all = append(all, e.key)
	}
	byBucket[0] = all
	out := map[[16]byte]bool{}
	for b, keys := range byBucket {
		rows, err := pool.Query(ctx, `SELECT key FROM causet_projection_applied WHERE bucket = $1 AND key = ANY($2::uuid[])`, b, keys)
		if err != nil {
			return nil, fmt.Errorf("read the dedupe ledger: %w", err)
		}
		var k [16]byte
		if _, err := pgx.ForEachRow(rows, []any{&k}, func() error { out[k] = true; return nil }); err != nil {
			return nil, fmt.Errorf("read the dedupe ledger: %w", err)
		}
	}
	return out, nil
}

// readItems reads the DLQ records at the coordinates of rows, in one pass
// from the lowest offset wanted on each partition.
func readItems(ctx context.Context, o dlq.ReaderOptions, rows []replayRow) (map[int]dlq.Item, error) {
	want := map[int32]map[int64]int{}
	from := map[int32]int64{}
	for _, r := range rows {
		if r.topic == nil || *r.topic != o.Topic {
			continue
		}
		p, off := *r.partition, *r.offset
		if want[p] == nil {
			want[p] = map[int64]int{}
			from[p] = off
		}
		want[p][off] = r.seq
		from[p] = min(from[p], off)
	}
	out := map[int]dlq.Item{}
	left := 0
	for _, offs := range want {
		left += len(offs)
	}
	if left == 0 {
		return out, nil
	}
	o.Start, o.Follow, o.Filter = dlq.FromOffsets(from), false, dlq.Filter{}
	rd, err := dlq.NewReader(ctx, o)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	errDone := errors.New("every record read")
	err = rd.Read(ctx, func(it dlq.Item) error {
		if seq, ok := want[it.Partition][it.Offset]; ok {
			out[seq] = it
			if left--; left == 0 {
				return errDone
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return nil, err
	}
	return out, nil
}

// parkedEntities returns which of the entities of evs have an event
// parked in proj.
func parkedEntities(ctx context.Context, pool *pgxpool.Pool, proj string, evs []actedOn) (map[entityRef]bool, error) {
	var forks, ids []string
	for _, e := range evs {
		if e.entity.id != "" {
			forks, ids = append(forks, e.entity.fork), append(ids, e.entity.id)
		}
	}
	parked := map[entityRef]bool{}
	if len(ids) == 0 {
		return parked, nil
	}
	rows, err := pool.Query(ctx, `SELECT DISTINCT p.fork_id, p.entity_id FROM causet_parked_events p
JOIN unnest($2::text[], $3::text[]) AS k(fork_id, entity_id) USING (fork_id, entity_id) WHERE p.projection = $1`, proj, forks, ids)
	if err != nil {
		return nil, fmt.Errorf("read the entities' parked events: %w", err)
	}
	var k entityRef
	if _, err := pgx.ForEachRow(rows, []any{&k.fork, &k.id}, func() error { parked[k] = true; return nil }); err != nil {
		return nil, fmt.Errorf("read the entities' parked events: %w", err)
	}
	return parked, nil
}
