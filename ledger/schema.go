package ledger

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/pgstore"
)

// Advisory locks are taken with two int4 keys, a space of their own that no
// single-bigint lock (the projection schema's, the relay's) can collide
// with: the schema's is (pgstore.LockClass, schemaLockKey); intent IDs are
// locked under IntentLockClass.
const (
	schemaLockKey   int32 = 0x6c646772 // "ldgr"
	IntentLockClass int32 = 0x696e7469 // "inti"
)

const schemaSQL = `
CREATE TABLE IF NOT EXISTS causet_intents (
	intent_id       text PRIMARY KEY,
	intent_type     text NOT NULL,
	entity_id       text NOT NULL,
	fork_id         text NOT NULL,
	status          text NOT NULL CHECK (status IN ('succeeded','rejected')),
	rule            text,
	reason          text,
	handler_version int NOT NULL,
	response        jsonb NOT NULL,
	recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS causet_entity_sequences (
	fork_id       text NOT NULL,
	entity_id     text NOT NULL,
	last_sequence bigint NOT NULL,
	PRIMARY KEY (fork_id, entity_id)
);
CREATE TABLE IF NOT EXISTS causet_events (
	position     bigserial PRIMARY KEY,
	event_id     text NOT NULL UNIQUE,
	fork_id      text NOT NULL,
	entity_id    text NOT NULL,
	sequence     bigint NOT NULL,
	event_type   text NOT NULL,
	intent_id    text NOT NULL REFERENCES causet_intents (intent_id),
	envelope     jsonb NOT NULL,
	recorded_at  timestamptz NOT NULL DEFAULT now(),
	published_at timestamptz,
	UNIQUE (fork_id, entity_id, sequence)
);
CREATE INDEX IF NOT EXISTS causet_events_unpublished ON causet_events (position) WHERE published_at IS NULL;
`

// EnsureSchema creates the ledger's tables and index if they do not exist.
// It is idempotent and safe to run concurrently.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return pgstore.EnsureSchema(ctx, pool, "ledger", schemaSQL, pgstore.LockClass, schemaLockKey)
}
