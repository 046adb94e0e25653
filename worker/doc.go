// Package worker builds the Temporal worker of `causet worker`: New
// registers ProjectionRetryWorkflow and ProjectionIncidentWorkflow (package
// workflows) with their versioning behaviors, and their activities (package
// activities: Activities, and Incidents when the worker probes incidents)
// under the names of package contract, with poller and concurrency sizes
// fit for thousands of short retry workflows. With a Worker Deployment
// Version (config.WorkerVersioning) the worker polls as that version; both
// workflows auto-upgrade (versioning.go).
//
// Beside the worker: EnsureSearchAttributes adds the Causet… Keyword search
// attributes where the server allows it (MissingSearchAttributesError lists
// the commands otherwise), MetricsHandler exports the SDK's metrics (tally)
// on a Prometheus registry, SDKLogger bridges the SDK's logs into slog (its
// per-attempt "Activity error." line demoted to debug), and
// DeadLetterMonitor exports the count and age of open dead-lettered retry
// workflows, read from visibility and the runs' memos.
//
// Neighbours: package app builds the worker (Service.NewWorker) for `causet
// worker` and `causet dev`. Below, this package uses workflows, activities
// and contract.
package worker
