package incident

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
)

// Store keeps incidents and their parked events in PostgreSQL: the bridge
// parks an event in the transaction of the batch it belongs to, so a parked
// event is durable exactly when its offset may be committed.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Row is an incident as the bridges see it.
type Row struct {
	ID    string
	State contract.IncidentState
	Input contract.IncidentInput
}

// Open records a holding incident in tx, unless it is already holding or
// releasing; it reports whether the row now holds (false: a release is
// under way, and events of the fingerprint take the normal path meanwhile).
func (s *Store) Open(ctx context.Context, tx pgx.Tx, in contract.IncidentInput) (bool, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return false, err
	}
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)
	tag, err := tx.Exec(ctx, `INSERT INTO causet_incidents (id, projection, fingerprint, state, input)
VALUES ($1, $2, $3, 'holding', $4)
ON CONFLICT (id) DO UPDATE SET state = 'holding', input = EXCLUDED.input, opened_at = now(), updated_at = now()
WHERE causet_incidents.state IN ('resolved', 'dead_lettered', 'holding')`, id, in.Projection, in.Fingerprint, b)
	if err != nil {
		return false, fmt.Errorf("incident: open %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Active lists the incidents that hold or release events.
func (s *Store) Active(ctx context.Context) ([]Row, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, state, input FROM causet_incidents WHERE state IN ('holding', 'releasing')`)
	if err != nil {
		return nil, fmt.Errorf("incident: list active incidents: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		var in []byte
		if err := r.Scan(&x.ID, &x.State, &in); err != nil {
			return x, err
		}
		return x, json.Unmarshal(in, &x.Input)
	})
}

// States returns the state of each incident of ids that has a row.
func (s *Store) States(ctx context.Context, ids []string) (map[string]contract.IncidentState, error) {
	out := make(map[string]contract.IncidentState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, state FROM causet_incidents WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("incident: read incident states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st contract.IncidentState
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// SetState moves incident id to state to if it is in one of from; it
// reports whether it did. An incident without a row (policy dead-letter)
// is left alone.
func (s *Store) SetState(ctx context.Context, id string, to contract.IncidentState, from ...contract.IncidentState) (bool, error) {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE causet_incidents SET state = $2, updated_at = now() WHERE id = $1 AND state = ANY($3)`, id, to, fs)
	if err != nil {
		return false, fmt.Errorf("incident: set %s %s: %w", id, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Parked is one parked (projection, event): its retry input carries the
// event, key, source and failed attempt 1 (nil for an event parked behind
// its key's earlier one without being attempted).
type Parked struct {
	Seq        int64
	IncidentID string
	Topic      string
	Partition  int32
	Retry      contract.RetryInput
}

// Park records events in tx and returns which of ps it inserted. An event
// parked before (its batch ran again after a restart) keeps its first row
// and is not among them.
func (s *Store) Park(ctx context.Context, tx pgx.Tx, ps []Parked) ([]bool, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	n := len(ps)
	var (
		inc, topic, proj, fork, ent, evid = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		part                              = make([]int32, n)
		retry                             = make([]string, n)
	)
	for i, p := range ps {
		b, err := json.Marshal(p.Retry)
		if err != nil {
			return nil, err
		}
		inc[i], topic[i], part[i] = p.IncidentID, p.Topic, p.Partition
		proj[i], fork[i], ent[i], evid[i] = p.Retry.Projection, p.Retry.Event.ForkID, p.Retry.Event.EntityID, p.Retry.Event.EventID
		retry[i] = string(b)
	}
	rows, err := tx.Query(ctx, `INSERT INTO causet_parked_events (incident_id, topic, partition, projection, fork_id, entity_id, event_id, retry)
SELECT a, b, c, d, e, f, g, h FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[]) WITH ORDINALITY AS x(a, b, c, d, e, f, g, h, n)
ORDER BY n
ON CONFLICT (projection, fork_id, event_id) DO NOTHING
RETURNING projection, fork_id, event_id`, inc, topic, part, proj, fork, ent, evid, retry)
	if err != nil {
		return nil, fmt.Errorf("incident: park events: %w", err)
	}
	type pairID struct{ p, f, e string }
	inserted := map[pairID]bool{}
	for rows.Next() {
		var id pairID
		if err := rows.Scan(&id.p, &id.f, &id.e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("incident: park events: %w", err)
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("incident: park events: %w", err)
	}
	out := make([]bool, len(ps))
	for i := range ps {
		out[i] = inserted[pairID{proj[i], fork[i], evid[i]}]
	}
	return out, nil
}

// Key is one (projection, fork, entity) with parked events.
type Key struct{ Projection, ForkID, EntityID string }

// ParkedKeys returns the keys of a partition that have parked events, with
// the incident of each key's latest one.
func (s *Store) ParkedKeys(ctx context.Context, topic string, partition int32) (map[Key]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (projection, fork_id, entity_id) projection, fork_id, entity_id, incident_id
FROM causet_parked_events WHERE topic = $1 AND partition = $2 ORDER BY projection, fork_id, entity_id, seq DESC`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("incident: list parked keys: %w", err)
	}
	defer rows.Close()
	out := map[Key]string{}
	for rows.Next() {
		var k Key
		var id string
		if err := rows.Scan(&k.Projection, &k.ForkID, &k.EntityID, &id); err != nil {
			return nil, fmt.Errorf("incident: list parked keys: %w", err)
		}
		out[k] = id
	}
	return out, rows.Err()
}

// WithParked returns those of keys that have parked events in a partition.
func (s *Store) WithParked(ctx context.Context, topic string, partition int32, keys []Key) (map[Key]bool, error) {
	n := len(keys)
	proj, fork, ent := make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		proj[i], fork[i], ent[i] = k.Projection, k.ForkID, k.EntityID
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT k.p, k.f, k.e FROM unnest($3::text[], $4::text[], $5::text[]) AS k(p, f, e)
WHERE EXISTS (SELECT 1 FROM causet_parked_events p WHERE p.topic = $1 AND p.partition = $2 AND p.projection = k.p AND p.fork_id = k.f AND p.entity_id = k.e)`,
		topic, partition, proj, fork, ent)
	if err != nil {
		return nil, fmt.Errorf("incident: look up parked keys: %w", err)
	}
	defer rows.Close()
	out := map[Key]bool{}
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Projection, &k.ForkID, &k.EntityID); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

// ParkedOf is the package-level ParkedOf on the store's pool.
func (s *Store) ParkedOf(ctx context.Context, topic string, partition int32, keys []Key, limit int) ([]Parked, error) {
	return ParkedOf(ctx, s.pool, topic, partition, keys, limit)
}

// Unpark is the package-level Unpark on the store's pool.
func (s *Store) Unpark(ctx context.Context, seqs []int64) error { return Unpark(ctx, s.pool, seqs) }

// Querier is a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ParkedOf returns, in parking order, up to limit parked events of keys in
// a partition.
func ParkedOf(ctx context.Context, q Querier, topic string, partition int32, keys []Key, limit int) ([]Parked, error) {
	n := len(keys)
	proj, fork, ent := make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		proj[i], fork[i], ent[i] = k.Projection, k.ForkID, k.EntityID
	}
	rows, err := q.Query(ctx, `SELECT p.seq, p.incident_id, p.retry FROM causet_parked_events p
JOIN unnest($3::text[], $4::text[], $5::text[]) AS k(p, f, e) ON p.projection = k.p AND p.fork_id = k.f AND p.entity_id = k.e
WHERE p.topic = $1 AND p.partition = $2
ORDER BY p.seq LIMIT $6`, topic, partition, proj, fork, ent, limit)
	if err != nil {
		return nil, fmt.Errorf("incident: read parked events: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Parked, error) {
		p := Parked{Topic: topic, Partition: partition}
		var b []byte
		if err := r.Scan(&p.Seq, &p.IncidentID, &b); err != nil {
			return p, err
		}
		return p, json.Unmarshal(b, &p.Retry)
	})
}

// Unpark deletes parked events by seq.
func Unpark(ctx context.Context, q Querier, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `DELETE FROM causet_parked_events WHERE seq = ANY($1)`, seqs); err != nil {
		return fmt.Errorf("incident: unpark events: %w", err)
	}
	return nil
}

// CountParked counts incident id's parked events.
func (s *Store) CountParked(ctx context.Context, id string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM causet_parked_events WHERE incident_id = $1`, id).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("incident: count parked events: %w", err)
	}
	return n, nil
}
