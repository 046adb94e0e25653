-- A rollout of a fixed projection (`causet projections rollout`) records the
-- failing events its check found: its replays read them in order, and its
-- progress counts which of them have applied since. The workflow's history
-- keeps only counts, however many events a rollout touches.
--
-- The previous release's processes run on the result: a new table only.

-- +causet expand
-- +goose Up
CREATE TABLE causet_rollout_events (
	rollout_id    text   NOT NULL,
	seq           int    NOT NULL,
	source        text   NOT NULL,
	projection    text   NOT NULL,
	fork_id       text   NOT NULL,
	event_id      text   NOT NULL,
	-- The event's dedupe-ledger key and hour bucket: applied once a ledger
	-- row has them.
	dedupe_key    uuid   NOT NULL,
	bucket        int    NOT NULL,
	-- The retry run to replay (dead letters) or that holds the event.
	workflow_id   text   NOT NULL,
	-- What the check said: would_apply, still_fails, out_of_order, not_handled.
	outcome       text   NOT NULL,
	-- Where a dead letter's record is, to restart a run that has closed.
	dlq_topic     text,
	dlq_partition int,
	dlq_offset    bigint,
	PRIMARY KEY (rollout_id, seq)
);

