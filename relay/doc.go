// Package relay is the outbox relay of the write path: it publishes the
// ledger's events (rows of causet_events with published_at IS NULL) to the
// events topic and then sets their published_at. `causet relay` runs it.
//
// Each round reads at most Batch unpublished rows in position order, produces
// them with franz-go's idempotent producer (all in-sync-replica acks), keyed
// by entityId, the value being the row's envelope encoded as an
// [event.Envelope], and marks the acknowledged positions published.
//
// # One relay at a time
//
// A relay reads and marks rows only while it holds a session advisory lock
// (pg_try_advisory_lock on [LockKey]), and on the connection that holds it,
// one of its own opened with the pool's settings: a relay whose connection
// broke, and with it the lock, can read and mark nothing more (a batch it
// had in flight may still reach Kafka, a re-send at worst). A second relay retries the lock every LockRetry and
// takes over once the first one's session ends.
//
// # Order
//
// Per (forkId, entityId) the topic carries the events in sequence order,
// counting each eventId where it first appears:
//
//   - The ledger takes an entity's sequence numbers under the row lock of
//     its causet_entity_sequences row, so two events of one entity commit in
//     sequence order and their positions grow with it: reading unpublished
//     rows in position order yields each entity's unpublished events in
//     order, with every earlier event of it already marked or in the batch.
//   - An entity's records share a key, hence a partition; the idempotent
//     producer keeps a partition's order and never appends a record after
//     one that failed (franz-go fails every record buffered behind a failed
//     one), so the acknowledged records of an entity are a prefix of its
//     records in the batch.
//   - After each batch the relay marks, per entity, the acknowledged
//     records that have no unacknowledged record of that entity before them
//     in the batch (a record set aside counts as done); the others are read
//     again, and come first again, since no later record of their entity
//     was marked.
//
// So marked rows are always a per-entity prefix, and whatever is sent is
// sent after every earlier event of its entity. A relay killed between
// Kafka's acknowledgement and the mark re-sends those rows: a duplicate is
// only ever a re-send of the same eventId (same bytes), which the
// projections' dedupe ledger absorbs.
//
// # Kafka down
//
// The producer tries a record RecordRetries times ([ProducerRecordRetries],
// with [ProducerBackoff] between tries and [ProducerRequestTimeout] per
// request) before its batch fails; the relay then waits with capped
// exponential backoff (MinBackoff to MaxBackoff) and sends the batch again,
// for as long as it takes. A record already sent without an answer is never
// failed by an idempotent producer (the broker may have written it): such a
// batch waits until the broker answers. Writers of intents never wait for
// the relay.
//
// # Events Kafka refuses
//
// A record Kafka refuses for itself (MESSAGE_TOO_LARGE and other
// record-level refusals) fails its whole batch, so each row of a refused
// batch is sent again alone: one acknowledged alone was refused only with
// its batch, one refused alone is set aside — recorded in
// causet_events_set_aside with Kafka's reason and logged at ERROR (event
// relay_event_set_aside) — and the relay publishes the events after it,
// its entity's included. ListSetAside lists them and Redrive puts them back
// in the outbox (`causet outbox list|redrive`); an event sent again comes
// after the later events of its entity that were published meanwhile.
//
// # Environment
//
//	CAUSET_RELAY_BATCH          rows per batch, 1 to 10000 (default 500)
//	CAUSET_RELAY_POLL_INTERVAL  wait after a batch that was not full, 1ms to 1m (default 100ms)
//
// read by [LoadSettings]; `causet relay` also reads DATABASE_URL,
// KAFKA_BROKERS and the Kafka TLS/SASL settings, CAUSET_EVENTS_TOPIC and
// CAUSET_METRICS_ADDR through package config.
//
// # Metrics
//
//	causet_relay_published_total       events published and marked
//	causet_relay_batch_failures_total  batches Kafka did not acknowledge whole
//	causet_relay_set_aside_total       events set aside by this relay
//	causet_relay_lag_events            unpublished rows, less those set aside (read from the database at each scrape)
//	causet_relay_lag_seconds           age of the oldest unpublished row
//	causet_relay_set_aside_events      events set aside, waiting for a redrive
//
// The database gauges are read by every relay, the waiting ones too, so a relay
// that cannot take the lock still shows an outbox that does not drain.
//
// # Neighbours
//
// Package app builds it for `causet relay` and `causet dev`, and the bench
// runs one of its own; `causet outbox` (cmd/causet) lists and re-drives
// set-aside events through it. Below, it uses event, config and internal/backoff; it reads
// the rows package ledger writes, and the bridge (package starter) consumes
// what it publishes.
package relay
