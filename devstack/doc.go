// Package devstack starts the embedded defaults of `causet dev`: a throwaway
// PostgreSQL cluster (initdb + pg_ctl in a temp dir; the server binaries are
// fetched once when the machine has none), a Temporal dev server
// (`temporal server start-dev` with the UI and Causet's search
// attributes) and an in-process Kafka cluster (kfake). Each is replaced by
// its environment variable when set (DATABASE_URL, TEMPORAL_ADDRESS,
// KAFKA_BROKERS); see [Start].
//
// Everything started here is stopped by its Stop method, which also removes
// its temp dir. Child processes run in their own process group. If this
// process dies without calling Stop (SIGKILL), a small watchdog shell notices
// and stops what was started. The process starters live in package
// [github.com/causet/projection-retry/internal/proc], which the test harness
// (internal/testenv) shares.
//
// Neighbours: the assembly layer. `causet dev` (cmd/causet) and the bench
// use it; it creates the example projections' tables and deploys them
// (projection, examples/projections) and the example intent handlers
// (intents, examples/intents), and makes the demo intents `causet dev
// --demo` submits through package client.
package devstack
