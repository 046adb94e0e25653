// Package app assembles the service that `causet worker`, `causet bridge`
// and `causet dev` run (and `causet bench` runs in process for its pool,
// engine, Temporal client and worker, and measures through its bridge
// child): the configuration, the logger, one Prometheus registry, the one
// pgx pool of the process, the projection engine on it, the Temporal client
// (TEMPORAL_* read with Temporal's own contrib/envconfig, or causet dev's
// own dev server) with the search attributes in place, and the DLQ producer.
// [Open] builds those; [Service.NewWorker] and [Service.NewBridge] build the
// Temporal worker (workflows and activities registered) and the Kafka bridge
// (its options filled from the configuration, with the PostgreSQL and
// Temporal outage probes) from them; [Service.Close] releases them.
//
// It is one place so that every command connects the same way: one Temporal
// connection path (TLS, API key, namespace, defaults), one DLQ producer (the
// configured brokers, TLS and SASL, all in-sync-replica acks) and one
// activities value, rather than a copy per command that can drift (a copy
// that forgets the Kafka TLS options, say, connects in one command and not
// in another).
package app
