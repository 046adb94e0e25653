// Package contract holds the names and records that Temporal, operators and
// other tools see (docs/CONTRACT.md): workflow, signal, query, update and
// activity names; workflow IDs; retry states and search attributes; error
// kinds; the attempt, source and DLQ-coordinate records; the workflow inputs
// and the status query's answer; and the one reader of "has this retry
// workflow settled".
//
// It is the leaf every other package shares: the bridge (starter), the
// workflows, the activities and the DLQ tooling (dlq) meet here instead of
// importing each other. It imports no project package but event and config.
package contract
