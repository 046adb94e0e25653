-- One writer per dead letter at a time. A PublishDeadLetter attempt whose
-- produce is still in flight when the attempt times out (a link that drops
-- what the broker sends back, a worker stopped mid-publish) may write its
-- record after the next attempt has looked for it on the topic and found
-- none. causet_dead_letter_claims holds, per dead letter, the attempt that
-- may be writing it and until when it may (fenced_until: the attempt's
-- write window plus the connection deadlines that bound a request already
-- handed to the kernel). Another attempt writes only once that time has
-- passed, after looking on the topic again.
--
-- The previous release's processes run on the result: a new table only,
-- which they do not use (their attempts look on the topic as before).

-- +causet expand
-- +goose Up
CREATE TABLE causet_dead_letter_claims (
	workflow_id  text        NOT NULL,
	run_id       text        NOT NULL,
	replay_count int         NOT NULL,
	attempt      int         NOT NULL,
	fenced_until timestamptz NOT NULL,
	PRIMARY KEY (workflow_id, run_id, replay_count)
);
