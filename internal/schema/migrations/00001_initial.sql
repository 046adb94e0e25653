-- The schema of the release before versioned migrations, written so that it
-- also adopts a database that release created: every statement is a no-op on
-- tables that exist, and a first-release (unpartitioned) dedupe ledger is
-- converted in place.

-- +causet contract
-- +goose Up

-- The write path's ledger: intents, per-entity sequences, events (the outbox).
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

-- Intent handler documents, one row per deployed version.
CREATE TABLE IF NOT EXISTS causet_intent_handlers (
	intent_type text        NOT NULL,
	version     int         NOT NULL CHECK (version > 0),
	document    jsonb       NOT NULL,
	deployed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (intent_type, version)
);

-- Projection IR documents, one row per deployed version.
CREATE TABLE IF NOT EXISTS causet_projection_versions (
	name        text        NOT NULL,
	version     int         NOT NULL CHECK (version > 0),
	document    jsonb       NOT NULL,
	deployed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, version)
);
-- One row; its version grows with every deploy, so an engine can tell with
-- one cheap read whether its cache is current.
CREATE TABLE IF NOT EXISTS causet_projection_catalog (
	id      boolean PRIMARY KEY DEFAULT true CHECK (id),
	version bigint  NOT NULL
);
INSERT INTO causet_projection_catalog (id, version) VALUES (true, 0) ON CONFLICT DO NOTHING;

-- The dedupe ledger: a 16-byte key per (projection, fork, event), partitioned
-- by the hour of occurredAt. Hour partitions are created and dropped by the
-- ledger's maintenance (projection.MaintainDedupe) as time passes; bucket 0
-- holds events outside the window.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION causet_applied_key(projection text, fork_id text, event_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $f$
	SELECT encode(substring(sha256(convert_to(
		octet_length(convert_to(projection, 'UTF8')) || ':' || projection ||
		octet_length(convert_to(fork_id, 'UTF8')) || ':' || fork_id || event_id, 'UTF8'))
		FROM 1 FOR 16), 'hex')::uuid
$f$;
-- +goose StatementEnd
-- A first-release ledger (one unpartitioned table keyed by text) is renamed
-- here and copied into bucket 0 below.
-- +goose StatementBegin
DO $m$ BEGIN
	IF EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass('causet_projection_applied') AND relkind = 'r') THEN
		ALTER TABLE causet_projection_applied RENAME TO causet_projection_applied_legacy;
		ALTER INDEX IF EXISTS causet_projection_applied_pkey RENAME TO causet_projection_applied_legacy_pkey;
	END IF;
END $m$;
-- +goose StatementEnd
CREATE TABLE IF NOT EXISTS causet_projection_applied (
	key        uuid        NOT NULL,
	bucket     int         NOT NULL,
	projection text        NOT NULL,
	ir_version int         NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (key, bucket)
) PARTITION BY LIST (bucket);
CREATE TABLE IF NOT EXISTS causet_projection_applied_unbucketed PARTITION OF causet_projection_applied FOR VALUES IN (0);
-- Bucket 0 is pruned by applied_at, which only grows: the index is
-- appended to, not written at random.
CREATE INDEX IF NOT EXISTS causet_projection_applied_unbucketed_at ON causet_projection_applied_unbucketed (applied_at);
-- One row: the hour buckets [lo, hi] that have partitions and are inside
-- the horizon, and the horizon the last maintenance used.
CREATE TABLE IF NOT EXISTS causet_projection_dedupe (
	id            boolean     PRIMARY KEY DEFAULT true CHECK (id),
	lo            int         NOT NULL,
	hi            int         NOT NULL,
	horizon       interval    NOT NULL,
	maintained_at timestamptz NOT NULL
);
-- Until the first maintenance the window is empty: every event is recorded
-- in bucket 0.
INSERT INTO causet_projection_dedupe (id, lo, hi, horizon, maintained_at) VALUES (true, 0, -1, interval '14 days', now())
ON CONFLICT (id) DO NOTHING;
-- +goose StatementBegin
DO $m$ BEGIN
	IF to_regclass('causet_projection_applied_legacy') IS NOT NULL THEN
		INSERT INTO causet_projection_applied (key, bucket, projection, ir_version, applied_at)
		SELECT causet_applied_key(projection, fork_id, event_id), 0, projection, ir_version, applied_at
		FROM causet_projection_applied_legacy
		ON CONFLICT DO NOTHING;
		DROP TABLE causet_projection_applied_legacy;
	END IF;
END $m$;
-- +goose StatementEnd

-- Incidents and the events an incident under the hold policy parks.
CREATE TABLE IF NOT EXISTS causet_incidents (
    id          text        PRIMARY KEY,
    projection  text        NOT NULL,
    fingerprint text        NOT NULL,
    state       text        NOT NULL,
    input       jsonb       NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS causet_parked_events (
    seq         bigserial   PRIMARY KEY,
    incident_id text        NOT NULL,
    topic       text        NOT NULL,
    partition   int         NOT NULL,
    projection  text        NOT NULL,
    fork_id     text        NOT NULL,
    entity_id   text        NOT NULL,
    event_id    text        NOT NULL,
    retry       jsonb       NOT NULL,
    parked_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projection, fork_id, event_id)
);
CREATE INDEX IF NOT EXISTS causet_parked_events_key ON causet_parked_events (topic, partition, projection, fork_id, entity_id, seq);
CREATE INDEX IF NOT EXISTS causet_parked_events_incident ON causet_parked_events (incident_id);

-- Keys the bridge holds behind a head (entity ordering).
CREATE TABLE IF NOT EXISTS causet_blocked_keys (
    topic      text        NOT NULL,
    partition  int         NOT NULL,
    projection text        NOT NULL,
    fork_id    text        NOT NULL,
    entity_id  text        NOT NULL,
    blocked_at timestamptz NOT NULL DEFAULT now(),
    head_workflow_id text  NOT NULL DEFAULT '',
    PRIMARY KEY (topic, partition, projection, fork_id, entity_id)
);
ALTER TABLE causet_blocked_keys ADD COLUMN IF NOT EXISTS head_workflow_id text NOT NULL DEFAULT '';
