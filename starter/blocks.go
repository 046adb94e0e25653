package starter

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LaneKey is the unit of ordering: while an event of a key retries, the
// key's later events wait in its lane (CAUSET_ORDERING=entity).
type LaneKey struct {
	Projection string
	ForkID     string
	EntityID   string
}

// BlockedKey is a blocked key and the retry workflow of the event that
// blocked it, which the bridge started outside the key's lane ("" when the
// key's first event went to a lane): the key stays blocked while that
// workflow has not settled.
type BlockedKey struct {
	LaneKey
	Head string
}

// BlockStore keeps the blocked keys of each partition, so that they survive
// bridge restarts and rebalances. Add and Remove take the transaction of
// the batch that blocks or unblocks the key (nil: use the store's own
// connection).
type BlockStore interface {
	// Load returns the blocked keys of a partition.
	Load(ctx context.Context, topic string, partition int32) ([]BlockedKey, error)
	// Add records keys as blocked (idempotent); a key already recorded
	// takes the new head: a bridge blocks only keys it holds unblocked, so
	// an older head has settled.
	Add(ctx context.Context, tx pgx.Tx, topic string, partition int32, keys []BlockedKey) error
	// Remove clears a key's block (idempotent).
	Remove(ctx context.Context, tx pgx.Tx, topic string, partition int32, key LaneKey) error
}

// NewPostgresBlockStore keeps blocked keys in the table causet_blocked_keys.
func NewPostgresBlockStore(pool *pgxpool.Pool) BlockStore { return pgBlockStore{pool} }

type pgBlockStore struct{ pool *pgxpool.Pool }

const (
	blockedLoadSQL = `SELECT projection, fork_id, entity_id, head_workflow_id FROM causet_blocked_keys
WHERE topic = $1 AND partition = $2`
	blockedInsertSQL = `INSERT INTO causet_blocked_keys (topic, partition, projection, fork_id, entity_id, head_workflow_id)
SELECT $1, $2, k.p, k.f, k.e, k.h FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS k(p, f, e, h)
ON CONFLICT (topic, partition, projection, fork_id, entity_id) DO UPDATE SET head_workflow_id = EXCLUDED.head_workflow_id`
	blockedDeleteSQL = `DELETE FROM causet_blocked_keys
WHERE topic = $1 AND partition = $2 AND projection = $3 AND fork_id = $4 AND entity_id = $5`
)

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (s pgBlockStore) q(tx pgx.Tx) execer {
	if tx != nil {
		return tx
	}
	return s.pool
}

func (s pgBlockStore) Load(ctx context.Context, topic string, partition int32) ([]BlockedKey, error) {
	rows, err := s.pool.Query(ctx, blockedLoadSQL, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("starter: load blocked keys: %w", err)
	}
	var out []BlockedKey
	for rows.Next() {
		var k BlockedKey
		if err := rows.Scan(&k.Projection, &k.ForkID, &k.EntityID, &k.Head); err != nil {
			rows.Close()
			return nil, fmt.Errorf("starter: load blocked keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("starter: load blocked keys: %w", err)
	}
	return out, nil
}

func (s pgBlockStore) Add(ctx context.Context, tx pgx.Tx, topic string, partition int32, keys []BlockedKey) error {
	if len(keys) == 0 {
		return nil
	}
	n := len(keys)
	ps, fs, es, hs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		ps[i], fs[i], es[i], hs[i] = k.Projection, k.ForkID, k.EntityID, k.Head
	}
	if _, err := s.q(tx).Exec(ctx, blockedInsertSQL, topic, partition, ps, fs, es, hs); err != nil {
		return fmt.Errorf("starter: record blocked keys: %w", err)
	}
	return nil
}

func (s pgBlockStore) Remove(ctx context.Context, tx pgx.Tx, topic string, partition int32, k LaneKey) error {
	if _, err := s.q(tx).Exec(ctx, blockedDeleteSQL, topic, partition, k.Projection, k.ForkID, k.EntityID); err != nil {
		return fmt.Errorf("starter: clear blocked key: %w", err)
	}
	return nil
}
