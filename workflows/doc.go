// Package workflows holds the deterministic workflow code:
// ProjectionRetryWorkflow (one event's retry schedule, dead letter and
// replay) and ProjectionIncidentWorkflow (one systemic failure).
// The names, IDs, search attributes and records they share with the bridge,
// the activities and the DLQ tooling are in package contract; nothing here
// talks to a Temporal client.
package workflows
