// Package dlq owns the dead-letter topic causet.projection-dlq.v1
// (CONTRACT §7): the record (schema version 1, JSON, with Spring Kafka's
// kafka_dlt-* headers beside the causet-* ones), its writer and its readers.
//
//   - Record, RunRecord and PoisonRecord: the value of a dead letter — the
//     run's attempts, its error and error kind, the original envelope (or
//     the raw value that was not one) and where it came from. A record is
//     bounded to MaxValueBytes: what does not fit is kept as a prefix with
//     its size and SHA-256 (Truncated). Decode refuses schema versions this
//     build does not know.
//   - Publisher writes a record synchronously (acks=all, idempotent) and
//     returns its coordinates.
//   - Reader reads the topic with a direct consumer (no consumer group, so
//     it commits nothing), from a Position, through a Filter, to the end
//     offsets it found at start or, following, until its context ends.
//   - Replayer replays what a Reader yields, as `causet dlq replay` does: it
//     signals a retry workflow still open in dead_lettered, starts a new run
//     of one that closed (RestartOptions), and leaves alone one that
//     succeeded or is retrying, so running it twice applies nothing twice.
//     A replay that could apply an event twice or undo a discard is refused
//     unless forced.
//
// Dead letters of incidents: an event parked behind a holding incident
// (package incident) that the incident dead-letters as a whole is written
// here by the bridge as any other dead letter, one record per event, so
// replay works on it the same way.
//
// Neighbours: the worker's PublishDeadLetter activity (package activities)
// and the bridge (package starter: poison records, starts Temporal
// refuses, dead-lettered parked events) publish; `causet dlq tail` and
// `causet dlq replay` (cmd/causet) read and replay; package app builds the
// publisher on the process's Kafka client. Below, this package uses contract
// (attempts, sources, workflow IDs and inputs, the replay signal), config
// (the retry schedule of a restarted run) and event.
package dlq
