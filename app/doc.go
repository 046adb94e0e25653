// Package app assembles the service that `causet worker`, `causet bridge`,
// `causet runtime`, `causet relay` and `causet dev` run (and `causet bench`
// runs in process for its pool, engine, Temporal client and worker, and
// measures through its bridge child): the configuration, the logger, one
// Prometheus registry, the one pgx pool of the process (its schema checked
// by internal/schema's Check), the projection engine on it (the dedupe
// ledger maintained every DedupeMaintainEvery), the Temporal
// client (TEMPORAL_* read with Temporal's own contrib/envconfig, or causet
// dev's own dev server; payload encryption from package payloadcodec) with
// the search attributes in place, and the DLQ producer. [Open] builds those
// ([WithWritePathOnly]: the pool and the registry only, for the commands
// that need no Temporal); [Service.Close] releases them.
//
// From them, the read side: [Service.NewWorker] and [Service.NewBridge]
// build the Temporal worker (workflows and activities registered, the
// dead-letter monitor started) and the Kafka bridge (its
// options filled from the configuration, with the PostgreSQL and Temporal
// outage probes, the parking and incident stores). The write side:
// [Service.NewRuntime] builds the HTTP server of intents (the handler
// catalog loaded, the ledger on the pool; listening on CAUSET_RUNTIME_ADDR)
// and [Service.NewRelay] the outbox relay (the pool, the configured brokers
// with their TLS and SASL, CAUSET_EVENTS_TOPIC). Everything counts on the
// one registry, which [ServeMetrics] (or [Service.ServeMetrics]) serves on
// CAUSET_METRICS_ADDR and the runtime on its own /metrics. Beside /metrics,
// the metrics server answers /healthz and /readyz ([Service.Health], package
// internal/health): PostgreSQL, Temporal where the process uses it, and the
// bridge's consumer-group membership. Every connection is dialed with
// internal/dialer's bounds (CAUSET_LINK_TIMEOUT) and traced by
// internal/tracing when OTEL_* asks for it.
//
// It is one place so that every command connects the same way: one Temporal
// connection path (TLS, API key, namespace, defaults), one set of Kafka
// options (the configured brokers, TLS and SASL; the DLQ producer and the
// relay with all in-sync-replica acks) and one activities value, rather than
// a copy per command that can drift (a copy that forgets the Kafka TLS
// options, say, connects in one command and not in another).
//
// Neighbours: the assembly layer. cmd/causet and package bench use it.
// Below, it puts together the roles (worker, starter, intentapi, and the
// activities the worker registers) and the parts they need (projection,
// intents, ledger, relay, dlq, incident, parking), with config, contract,
// payloadcodec and the internal leaves.
package app
