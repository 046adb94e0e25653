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
-- The previous release's processes run on the result: new columns with
-- defaults or nullable, all instant. They neither count nor fill the new
-- columns; a rollout row without an entity replays as before.

-- +goose Up
ALTER TABLE causet_incidents ADD COLUMN events_affected bigint NOT NULL DEFAULT 0;
ALTER TABLE causet_incidents ADD COLUMN events_held bigint NOT NULL DEFAULT 0;
ALTER TABLE causet_rollout_events ADD COLUMN entity_id text;
ALTER TABLE causet_rollout_events ADD COLUMN sequence bigint;

