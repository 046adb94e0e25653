// Package layers holds the check, run by go test, that the module's imports
// point down the layers docs/ARCHITECTURE.md draws: leaves (internal/…),
// records (event, config, contract, payloadcodec, examples/…), parts
// (projection, intents, ledger, parking, dlq, incident, relay, client),
// roles (workflows, activities, starter, worker, intentapi), assembly (app,
// devstack) and commands (cmd/causet, bench, reliability, securitytest,
// deployments/…). It also refuses the few imports the layers allow but the
// design does not (the retry workflow and the activities meet only in
// package contract; the write path does not import the projection engine).
// A package in no layer is reported, not placed by default.
//
// It reads the non-test imports of `go list -json ./...`: tests stand
// outside the graph. It has no code outside its test, imports no project
// package and is imported by none.
package layers
