// Package reliability holds the reliability suite: scenarios that kill,
// stop and break the bridge, the worker, PostgreSQL, Temporal and Kafka
// while events flow, park thousands of events behind one key's failing head
// and kill the bridge while they are released, release many keys while the
// group rebalances, then count what was lost, applied twice,
// applied out of order, dead-lettered and started as workflows. Scenarios
// 11-13 do the same to the write path (runtime and relay processes, intents
// from concurrent clients): intents answered and recorded once, every
// ledger event on the topic in per-entity order, read models exact.
// Scenario 14 breaks one of two projections with a migration: one incident
// holds its events through a kill -9 of the bridge and the worker and
// releases each once, in entity order, after the fix. Scenarios 17-22 run
// each process on a test host of its own (a network namespace joined by a
// veth link, testenv.Network) and cut, slow or lose the link between it and
// PostgreSQL, Kafka or Temporal without a word, as a partition does; they
// need root, ip and nft. The scenarios are Go
// tests in this package; they are heavy, so they skip unless
// CAUSET_RELIABILITY is set:
//
//	CAUSET_RELIABILITY=1 go test -v -timeout 150m ./reliability/   # full profile
//	CAUSET_RELIABILITY=short go test -v ./reliability/              # CI profile
//	scripts/reliability.sh [--short]                                # all, with the summary line
//
// Scenarios 1-7 run once per ordering, as subtests "entity" (CAUSET_ORDERING
// unset: the default) and "none"; the short profile runs only "entity".
// CAUSET_RELIABILITY_PROFILE=short|full overrides the profile and
// CAUSET_RELIABILITY_ORDERINGS=entity,none the orderings. Each scenario run
// prints one machine-readable line to stdout:
//
//	RELIABILITY scenario=<name>/<ordering> passed=<bool> lost=<n> double_applied=<n> duplicate_workflows=<n> ...
//
// which scripts/reliability.sh aggregates. See RELIABILITY.md for the figures.
//
// It is test code only. Neighbours: a command-layer package that nothing
// imports. Its harness builds cmd/causet and runs the bridge, the worker,
// the runtime and the relay as processes of that binary, on
// internal/testenv's PostgreSQL, Temporal and Kafka, deploys the example
// documents (projection, intents), submits intents with client, and reads
// outcomes through dlq, ledger, contract and app's Temporal client.
package reliability
