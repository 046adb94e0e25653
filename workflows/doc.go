// Package workflows holds the deterministic workflow code of the read side:
//
//   - ProjectionRetryWorkflow: one (projection, event) that failed its first
//     attempt. It runs the retry schedule of config.Retry.Plan through the
//     ApplyProjection activity, dead-letters the event with
//     PublishDeadLetter when every attempt failed, then waits for the replay
//     window in state dead_lettered for a replay signal (the whole schedule
//     again) or a discard. Under CAUSET_INCIDENT_POLICY=hold a run whose
//     schedule ran out with the failure of a holding incident waits with it
//     (state held) and runs its schedule again once the incident is
//     resolved. Its state is the CausetRetryState search attribute and the
//     answer of the status query.
//   - ProjectionIncidentWorkflow: one systemic failure of a projection
//     (package incident detects it in the bridge, which starts and signals
//     this workflow). It probes with a sample event on a backoff, at once
//     when the projection's IR is deployed, until a probe succeeds or an
//     operator signals resolve or dead-letter-all; under policy hold it then
//     moves the incident's row to releasing (or dead_lettered) and waits
//     until the bridges have released every parked event.
//
// Workflow code calls its activities by their registered names (package
// contract), so nothing here imports package activities, and nothing here
// talks to a Temporal client. Changes to workflow code go behind
// workflow.GetVersion; the recorded histories in testdata are replayed by
// TestReplayRecordedHistories, and `go tool workflowcheck ./workflows/...`
// checks determinism.
//
// Neighbours: package worker registers both workflows with their versioning
// behaviors. The bridge (package starter) starts retry workflows, its
// incident registry (package incident) starts and signals incident
// workflows, and `causet dlq` and `causet incidents` (cmd/causet, package
// dlq) send the operators' signals, all by the names in package contract. Below, this
// package uses contract (names, inputs, states, search attributes) and
// config (the retry plan, the incident policy).
package workflows
