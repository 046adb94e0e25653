// Package config reads the service's environment (CONTRACT §3) with
// validation and defaults. A bad value stops the program with one line
// naming the variable, the value and what is allowed; nothing silently
// falls back to a default.
//
// It owns every variable of the contract and the types they become: Config
// (FromEnv), the retry schedule (Retry, whose Plan is the one place the
// PROJECTION_WORKER_* values become attempt offsets, delays and Temporal's
// RetryPolicy, in inline and workflow mode alike), the bridge's Mode and
// Ordering, KafkaSecurity (TLS and SASL for every Kafka client), the
// payload encryption keys (PayloadKeys), incident detection (Incidents),
// Worker Versioning (WorkerVersioning), and the defaults other packages
// share (DefaultEventsTopic, DefaultTaskQueue, …). Variables lists every
// name it reads.
//
// Neighbours: it is a record every layer above reads — the bridge
// (starter), the workflows, the DLQ tooling, incidents, the relay, the
// runtime (intentapi), contract and payloadcodec, and package app and
// cmd/causet, which load it once per process. Below, it uses only
// internal/dialer, for the bounds of CAUSET_LINK_TIMEOUT.
package config
