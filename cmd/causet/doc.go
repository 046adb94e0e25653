// Command causet runs Causet's write path and its projection worker on
// Temporal, and their tooling: dev (the whole stack on embedded defaults),
// runtime and relay (the write path: intents in, events out to Kafka),
// bridge and worker (the projection side), intents and projections (deploy
// the documents), submit (intents through the retrying client), dlq,
// produce and bench. Every command assembles the service through
// package app.
package main
