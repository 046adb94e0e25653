// Package rollout closes the operator's fix loop: it tries a candidate IR
// document on the events of its projection that are failing now, then
// rolls it out.
//
// Gather lists the failing events from where they wait: dead letters (the
// newest DLQ record of each run not settled since, and runs Temporal lists
// as dead-lettered), events held by an incident or parked behind a failing
// head (causet_parked_events), and retry runs still on their schedule. It
// only reads, and stops at a limit. Check applies them with the candidate
// through projection.Engine.Try, in transactions that roll back, and groups
// the outcomes by the fingerprint of the failure each waits on (as
// package incident fingerprints): would apply, still fails (and how),
// refused as out of order (a dead letter whose entity applied a later
// event), not handled. `causet projections check` prints that report.
//
// Runner does the work of the rollout workflow's activities
// (workflows.ProjectionRolloutWorkflow, activities.Rollouts): the check,
// recording the affected events in causet_rollout_events under the
// rollout's workflow ID; an idempotent deploy (none when the newest
// version is the candidate already), with a probe asked of the
// projection's holding incidents; the replays of the dead letters the
// check says the candidate applies, in order, through dlq.Replayer; and the
// count of affected events applied (the dedupe ledger has them), failing
// again (dead-lettered since the deploy) or pending.
//
// Neighbours: package app builds the Runner from the configuration;
// cmd/causet's `projections check` and `projections rollout` use it and
// start the workflow; package worker registers the workflow.
package rollout
