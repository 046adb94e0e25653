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
// Where things are:
//   - bridge.go: the Kafka client, poll loop, fetch pauses, assignment and
//     offset commits; options.go: Options and their defaults.
//   - partition.go: one partition's queue, decoding and commit bookkeeping
//     (segments); it hands decoded batches to its router.
//   - router.go: the router interface and directRouter (CAUSET_ORDERING=none);
//     lanes.go, lanesend.go, sweep.go, lanelost.go and blocks.go: laneRouter
//     (CAUSET_ORDERING=entity) — hold rules and before-commit hook, the lane
//     sender, the sweeper that unblocks keys, lost-lane recovery and the
//     PostgreSQL block store.
//   - apply.go: the inline apply through database outages, isolation of a
//     batch that fails as a whole, and outcome counting.
//   - handoff.go: the hand-off to Temporal (MaxInflight bound, start until
//     durable, refusals dead-lettered) and the bridge's own dead letters.
//   - retry.go: the one retry loop every dependency wait uses (backoff,
//     outage proven by a probe).
//   - engine.go: what the bridge needs of the projection engine.
//   - incidents.go and parked.go: incidents (CONTRACT §12) — detection,
//     the incident registry, parking a holding incident's events in the
//     batch's transaction and releasing them in entity order.
package starter
