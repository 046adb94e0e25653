// Package bench is `causet bench`: one run that measures the PostgreSQL
// ceiling, the bridge end to end in inline mode at 0%, 1% and 10% failing
// events, workflow mode, the seed's in-place-retry design (the peer), retry
// topics (a delay topic per retry, the common Kafka design; see
// retrytopics.go), the default schedule's accuracy on Temporal, the
// hand-off capacity against raw ExecuteWorkflow calls, the bridge's memory
// with many failures in flight, the write path (intents), and inline mode
// against the dedupe ledger's history (history.go), and writes results.md,
// results.json, chart.svg and history.svg.
//
// The bridge under test is the real one, run as a child process (`causet
// bridge`, via Options.BridgeCommand) so its resident set is its own: the
// bench process also holds the in-process Kafka (kfake) with every record,
// the Temporal worker, the peers and the producers. Throughput is timed from
// the first poll of the bridge's metrics that shows a consumed record to the
// first that shows every event applied or handed off (20 ms polls), so
// process start, Temporal dial and the consumer group join are not counted.
//
// Runs that start workflows (inline with failures, hand-off, raw and eager
// starts) also report the Temporal server's own figures for their starts,
// read from its Prometheus endpoint before and after (servermetrics.go):
// start latency, persistence calls and server CPU per start. Only the dev
// server the bench starts has its endpoint known; with TEMPORAL_ADDRESS they
// are left out.
//
// The intents phase needs PostgreSQL and Kafka only: the runtime server
// (package intentapi on package ledger, the example intent handlers deployed)
// runs in the bench process on a loopback listener and is driven by
// IntentClients goroutines through package client; its ceiling is the same
// rows written directly with pgx at the same concurrency, by the ledger's own
// record statement in one transaction per intent; then the outbox
// relay (package relay) drains the backlog both left.
//
// The history phase runs in a database of its own, dropped at the end: its
// ledger is loaded with COPY to 10M and 50M prior applied events (quick: 1M
// and 5M), spread over the hour partitions of the 10 days before, and
// maintenance at a 1-day horizon prunes it last.
//
// CAUSET_BENCH_PHASES, a comma-separated subset of ceiling, schedule,
// inline, history, peer, retrytopics, workflow, handoff and intents, runs
// only those phases (the stack is started all the same).
//
// Neighbours: a command-layer package; `causet bench` (cmd/causet) runs
// it. It assembles its stack with package app and devstack (PostgreSQL,
// Temporal, kfake), drives the real bridge as a child process and the
// runtime (intentapi, ledger), relay and client in process, deploys the
// example projections and intent handlers, and migrates its own databases
// with internal/schema.
package bench
