-- Holds and rollouts that always finish.
--
-- causet_incidents keeps a hold's counts (events_affected, events_held), so
-- a restarted incident run goes on from them instead of from zero, and its
-- rows take one more state, dead_lettering (the state column is text): like
-- releasing, a row whose run is still dead-lettering its held events does
-- not reopen, so one run drains exactly one hold.
--
-- causet_rollout_events keeps each event's entity and sequence, so a
-- rollout replays the dead letters of one entity in their order, one after
-- the other has settled.
--
-- causet_dead_letters remembers, for a week, where each retry run's dead
-- letter was published: a PublishDeadLetter retried after its record was
-- written (its completion lost in a Temporal outage) returns that record
-- instead of writing a second one.
--
-- The previous release's processes run on the result: new columns with
-- defaults or nullable and a new table, all instant. They neither count
-- nor fill the new columns; a rollout row without an entity replays as
-- before.

-- +causet expand
-- +goose Up
ALTER TABLE causet_incidents ADD COLUMN events_affected bigint NOT NULL DEFAULT 0;
ALTER TABLE causet_incidents ADD COLUMN events_held bigint NOT NULL DEFAULT 0;
ALTER TABLE causet_rollout_events ADD COLUMN entity_id text;
ALTER TABLE causet_rollout_events ADD COLUMN sequence bigint;
CREATE TABLE causet_dead_letters (
	workflow_id  text        NOT NULL,
	run_id       text        NOT NULL,
	replay_count int         NOT NULL,
	topic        text        NOT NULL,
	partition    int         NOT NULL,
	"offset"     bigint      NOT NULL,
	published_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (workflow_id, run_id, replay_count)
);
