// Package activities implements the Temporal activities of the two
// workflows in package workflows, which call them by the names in package
// contract (never through this package's types: the two meet only there).
//
// Activities serves ProjectionRetryWorkflow:
//
//   - ApplyProjection makes one attempt at one (projection, event) through
//     the projection engine (the Applier, a *projection.Engine). It carries
//     every earlier attempt forward in its heartbeat details and returns
//     them all as the last error's details, so the workflow, its result, the
//     UI and the dead letter show each attempt's time and error. In the
//     apply transaction a replay that would apply an older event after a
//     newer one of its entity is refused (unless forced), and a successful
//     attempt settles the run as its key's head (package parking).
//   - PublishDeadLetter records a head's dead letter on its key, then writes
//     the DLQ record (package dlq) and returns where it landed; its retry
//     policy never gives up.
//   - SettleHead records that a dead-lettered run no longer holds its key
//     (discarded, or its replay window ended).
//   - JoinIncidentHold and AwaitIncidentEnded let a run whose schedule ran
//     out with a failure a holding incident has (CAUSET_INCIDENT_POLICY=hold)
//     wait with that incident instead of being dead-lettered.
//
// Incidents serves ProjectionIncidentWorkflow: ProbeIncident tries the
// incident's sample event in a transaction it always rolls back,
// SetIncidentState moves the incident's row (package incident's store) and
// with it the heads of its keys, and AwaitIncidentReleased waits until the
// bridges have released every event parked behind the incident.
//
// Each attempt writes the contract's log lines (projection_retry,
// projection_dead_lettered, projection_replayed) and counts them in Metrics.
//
// Neighbours: package worker registers both types on the Temporal worker,
// and package app fills them (the engine, the DLQ publisher, the parking and
// incident stores). Below, this package uses projection (the engine's
// ApplyWith and result statuses), dlq (the record and publisher), parking
// (head states), incident (the incident store and fingerprints), contract
// and event.
package activities
