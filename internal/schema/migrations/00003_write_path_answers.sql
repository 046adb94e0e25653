-- The write path answers only what is true. The outbox relay sets aside an
-- event Kafka refuses for itself (a record too large for the topic, say)
-- with the reason, and moves on; `causet outbox list` shows such events and
-- `causet outbox redrive` sends them again. An intent keeps a fingerprint of
-- the request that recorded it, so that a re-used intentId with another
-- request is refused rather than answered with the first one's outcome
-- (intents recorded before have none, and are answered as before).
--
-- The previous release's processes run on the result. Both statements are
-- instant: a new table, and a nullable column without a default.

-- +causet expand
-- +goose Up
CREATE TABLE causet_events_set_aside (
	position     bigint      PRIMARY KEY,
	event_id     text        NOT NULL,
	reason       text        NOT NULL,
	set_aside_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE causet_intents ADD COLUMN request_hash bytea;
