// Package health answers GET /healthz and GET /readyz for every process
// that serves them (the worker, the bridge, the runtime, the relay, and an
// intentapi.Server's ops handler): one JSON body, one timeout
// (DefaultTimeout), one way of naming a failing dependency (CONTRACT §10).
// /healthz is 200 while the process runs; /readyz runs every Check at once
// and is 200 when all answered within the timeout, else 503 naming the
// failing ones. Checks may be added while it serves.
//
// Neighbours: a leaf. Package app builds the checks themselves
// (PostgreSQL, Temporal, Kafka group membership) and serves them beside
// /metrics; package intentapi registers a Health on its ops handler. It
// imports no project package.
package health
