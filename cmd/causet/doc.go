// Command causet runs Causet's write path and its projection worker on
// Temporal, and their tooling: dev (the whole stack on embedded defaults),
// runtime and relay (the write path: intents in, events out to Kafka),
// bridge and worker (the projection side), intents and projections (validate
// and deploy the documents), migrate (the schema), submit (intents through
// the retrying client), produce (events straight to Kafka), dlq (tail and
// replay dead letters), blocked (keys waiting under entity order),
// incidents (list and signal incident workflows), outbox (set-aside events
// of the relay), codec-server (the payload codec endpoint for the Temporal
// UI and CLI) and bench.
//
// Neighbours: the top of the layers; nothing imports it. The long-running
// commands (runtime, relay, bridge, worker, dev) assemble the service
// through package app, and bench runs package bench; the tooling
// commands connect to what they need (app's Temporal and Kafka clients, a
// small pool of their own) and call the parts directly: projection,
// intents, dlq, incident, parking, relay, client, internal/schema,
// payloadcodec. `causet dev` starts its services with package devstack.
package main
