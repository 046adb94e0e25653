// Package contract holds the names and records that Temporal, operators and
// other tools see (docs/CONTRACT.md): workflow, signal, query and activity
// names, of the retry and the incident workflows alike; workflow IDs; retry and incident states and search attributes (one builder);
// error kinds; the attempt, source and DLQ-coordinate records; the
// workflow and activity inputs and outputs; the status query's answers; and
// the one reader of "has this retry workflow settled".
//
// It is the record every part and role shares: the bridge (starter), the
// workflows, the activities, the worker and the DLQ tooling (dlq) meet here
// instead of importing each other, and incident, parking and projection use
// its names, states and error kinds. Below, it imports no project package
// but event and config.
package contract
