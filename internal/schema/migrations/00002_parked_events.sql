-- Entity ordering parks a blocked key's later events in PostgreSQL, for every
-- kind of head: a retry workflow, a dead letter held under
-- CAUSET_DLQ_HOLD_ENTITY, a holding incident. The key's row carries its head
-- and the head's state (written by the worker as the head settles), the
-- count of its parked events, and the retry input of a head still to be
-- started; the parked events no longer name an incident of their own (their
-- key's head does). Also the per-(projection, fork, entity) mark of the
-- highest applied sequence, which guards replays.
--
-- The previous release's processes cannot run on the result (its bridges
-- kept later events in lane workflows): stop its bridges and let its lanes
-- finish before migrating (docs/UPGRADES.md). Small tables only: blocked
-- keys and parked events are bounded by the hold and by the keys that fail.

-- +causet contract
-- +goose Up
ALTER TABLE causet_blocked_keys
	ADD COLUMN head_state    text   NOT NULL DEFAULT 'retrying',
	ADD COLUMN parked        bigint NOT NULL DEFAULT 0,
	ADD COLUMN through       bigint NOT NULL DEFAULT -1,
	ADD COLUMN pending_start jsonb;
CREATE INDEX causet_blocked_keys_head ON causet_blocked_keys (head_workflow_id);
-- The keys whose head has moved on, which the bridges poll for.
CREATE INDEX causet_blocked_keys_moved ON causet_blocked_keys (topic, partition) WHERE head_state <> 'retrying';

-- Parked events of a key without a row (a release the previous release left
-- half done) get one, behind the incident that parked them.
INSERT INTO causet_blocked_keys (topic, partition, projection, fork_id, entity_id, head_workflow_id)
SELECT DISTINCT ON (topic, partition, projection, fork_id, entity_id) topic, partition, projection, fork_id, entity_id, incident_id
FROM causet_parked_events
ORDER BY topic, partition, projection, fork_id, entity_id, seq
ON CONFLICT DO NOTHING;
UPDATE causet_blocked_keys k SET parked = p.n
FROM (SELECT topic, partition, projection, fork_id, entity_id, count(*) AS n FROM causet_parked_events
	GROUP BY topic, partition, projection, fork_id, entity_id) p
WHERE (k.topic, k.partition, k.projection, k.fork_id, k.entity_id) = (p.topic, p.partition, p.projection, p.fork_id, p.entity_id);
DROP INDEX causet_parked_events_incident;
ALTER TABLE causet_parked_events DROP COLUMN incident_id;
-- The oldest parked event of a partition, for the age gauge.
CREATE INDEX causet_parked_events_partition ON causet_parked_events (topic, partition, seq);

-- The highest sequence each (projection, fork, entity) has applied, and the
-- event that carried it.
CREATE TABLE causet_applied_sequences (
	projection text   NOT NULL,
	fork_id    text   NOT NULL,
	entity_id  text   NOT NULL,
	sequence   bigint NOT NULL,
	event_id   text   NOT NULL,
	PRIMARY KEY (projection, fork_id, entity_id)
);
