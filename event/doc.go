// Package event decodes and validates the Causet event envelope (CONTRACT
// §4) carried as the value of records on the events topic: eventId,
// eventType, entityId, forkId, intentId, sequence, occurredAt and payload.
//
// Decode bounds a value's size (MaxSize) and nesting (MaxDepth) and refuses
// what PostgreSQL and Temporal cannot store: NUL, identifying fields over
// their limits (which keep workflow IDs and search attributes within
// Temporal's), payloads that would encode past MaxEncodedPayloadBytes.
// Everything it refuses is an *InvalidError, which the bridge dead-letters
// at once as invalid_event, never retried. Fields is the envelope as CEL
// expressions see it, integral numbers as int64 (so integer division by
// zero is an error).
// PlainNumbers writes numbers as PostgreSQL's jsonb renders them, so the
// write path checks an event in the form the relay will send.
//
// Neighbours: a record with no project imports of its own. The bridge
// (starter), the projection engine, the activities, dlq, incident and
// contract read envelopes with it; on the write path intents and ledger
// build and check them, the relay publishes them, and client and intentapi
// carry them in their answers.
package event
