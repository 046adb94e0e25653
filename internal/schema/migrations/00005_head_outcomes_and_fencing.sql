-- A blocked key's head is released only for a recorded outcome, and only
-- the partition's current owner writes its keys.
--
-- head_input keeps the head's retry input for as long as it is the key's
-- head (pending_start is cleared once its workflow starts): a head that ends
-- without applying or dead-lettering its event (terminated, timed out,
-- gone) has its event dead-lettered by the bridge from this row.
--
-- causet_ended_heads remembers, for a day, the retry runs the bridge found
-- ended without an outcome and dead-lettered itself: an attempt of such a
-- run still in flight (a terminate does not stop a running activity) is
-- refused instead of applying its event after the key's later ones.
--
-- causet_partition_owners fences bridges: each owner of a (consumer group,
-- topic, partition) claims it with the next epoch as it takes it, and every
-- transaction that applies, parks or releases for the partition checks the
-- epoch it holds. A bridge that lost the partition (cut from Kafka, still
-- reaching PostgreSQL) fails its next transaction instead of writing.
--
-- The previous release's processes run on the result: a nullable column
-- and new tables, all instant. They neither fill head_input nor claim
-- partitions; a head without head_input is settled as before.

-- +causet expand
-- +goose Up
ALTER TABLE causet_blocked_keys ADD COLUMN head_input jsonb;
UPDATE causet_blocked_keys SET head_input = pending_start WHERE pending_start IS NOT NULL;
CREATE TABLE causet_ended_heads (
	workflow_id text        PRIMARY KEY,
	ended_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE causet_partition_owners (
	consumer_group text        NOT NULL,
	topic          text        NOT NULL,
	partition      int         NOT NULL,
	epoch          bigint      NOT NULL,
	owner          text        NOT NULL,
	claimed_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer_group, topic, partition)
);
