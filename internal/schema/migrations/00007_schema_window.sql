-- The schema's compatibility window. Each migration declares whether the
-- previous release's processes run on its result (expand) or not
-- (contract); causet_schema_kinds records the kind of every migration the
-- database has seen (every `up` writes those of its build), so that a
-- process of an older build, started on a newer schema (restarted halfway
-- through a rolling upgrade, or rolled back), runs exactly when every
-- migration past its own is an expand, and otherwise refuses with one line
-- naming the migration that stops it (docs/UPGRADES.md).
--
-- The previous release's processes run on the result: a new table only.
-- They refuse any newer schema, as before; builds from this one on read
-- the table.

-- +causet expand
-- +goose Up
CREATE TABLE causet_schema_kinds (
	version bigint PRIMARY KEY,
	name    text   NOT NULL,
	kind    text   NOT NULL CHECK (kind IN ('expand', 'contract'))
);
