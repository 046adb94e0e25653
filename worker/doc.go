// Package worker wires the Temporal worker: registration, client options,
// search attributes and metrics.
package worker
