// Package starter is the Kafka bridge: the process that starts workflows,
// as the starter is in Temporal's samples. It consumes the events topic,
// runs attempt 1 of every matched (projection, event) inline (or hands
// every one to Temporal in workflow mode), starts a ProjectionRetryWorkflow
// for each failure and commits a record's offset only once it and every
// record before it in its partition is applied, skipped, dead-lettered or
// durably handed to Temporal.
//
// Each owned partition has one worker goroutine, so partitions progress
// concurrently while a partition's records are processed in order. Workflow
// starts run concurrently (at most Options.MaxInflight); a partition waiting
// for a slot, or retrying a batch during a database outage, lets its queue
// fill and its fetching is paused. Offsets are committed from the poll loop
// between a poll and AllowRebalance (BlockRebalanceOnPoll), and in
// OnPartitionsRevoked, so the bridge never commits for a partition it no
// longer owns.
//
// Where things are (each type's methods in its own file):
//   - bridge.go: Bridge — the Kafka client, poll loop, fetch pauses,
//     assignment, offset commits, and the bridge's ends of the incident
//     registry (package incident); options.go: Options and their defaults.
//   - partition.go: partition — one partition's queue, decoding, commit
//     bookkeeping (segments), and the inline apply through database outages
//     with isolation of a batch that fails as a whole.
//   - handoff.go: handoffs — the hand-off to Temporal (MaxInflight slots,
//     start until durable, refusals dead-lettered) and the DLQ.
//   - waits.go: waits and retrier — the one retry loop every dependency
//     wait uses (backoff, an outage proven by a probe).
//   - router.go: the router interface and directRouter (CAUSET_ORDERING=none).
//   - ordered.go and release.go: orderedRouter (CAUSET_ORDERING=entity) —
//     the hold rule and the batch plan that parks a blocked key's events in
//     the batch's transaction (ordered.go); the release of settled keys'
//     parked events in runs (release.go). The table is package parking's.
//   - heads.go: headWatcher — finds the blocked keys whose head has settled
//     and wakes their partitions.
//   - tracing.go: recordTracer — the spans of batches and hand-offs.
//   - engine.go: what the bridge needs of the projection engine.
//
// Neighbours: package app fills Options for `causet bridge` and `causet
// dev` (the bench runs that bridge as a child). Below, the bridge uses the
// projection engine (through the Engine interface), parking (blocked keys
// and parked events), incident (the Registry), dlq (the publisher of poison
// and refused records), contract (workflow IDs, inputs, search attributes),
// config, event, internal/backoff and internal/tracing. The workflows it
// starts are package workflows', run by the worker.
package starter
