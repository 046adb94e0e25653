// Package ledger records intents and their events in PostgreSQL, one
// transaction per intent, as the runtime's write path.
//
// Submit, in one transaction:
//
//  1. in one round trip with BEGIN, serializes the intent ID
//     (pg_advisory_xact_lock on its hash) and looks it up in causet_intents:
//     an intent already recorded returns its recorded response, byte for
//     byte, and writes nothing;
//  2. runs the handler (the Decider) with reads in the same transaction;
//  3. for an accepted intent, in one statement (RecordSQL) sent with COMMIT
//     in one round trip: takes the entity's next sequence numbers from
//     causet_entity_sequences (an upsert whose row lock serializes the
//     writers of one (fork, entity), so their events get consecutive numbers
//     and commit in sequence order), inserts its events into causet_events,
//     where the outbox relay finds them (published_at NULL, in position
//     order), and the intent row with the exact response body. A rejected
//     intent's row is inserted and committed the same way. A failed
//     statement stops the round trip before COMMIT, so the transaction is
//     rolled back with nothing written.
//
// Event n (1-based) of an intent has the ID <intentId>:<n>, so a re-run of
// an intent can never mint different events. Its envelope carries eventId,
// eventType, entityId, forkId, intentId, sequence, occurredAt (the
// transaction's now(), UTC) and payload, and is checked with event.Decode
// before it is written.
//
// # Retries
//
// Only infrastructure is retried: the pgx pool evicts broken connections
// (health checks, and a failed connection is never returned to the pool),
// and acquiring a connection plus its first round trip (BEGIN, the intent
// lock and the lookup, which write nothing) is tried DefaultTries (3) times,
// waiting 100 ms and then 1 s between tries, each try bounded by 5 s
// (WithRetry changes them). Nothing after that is retried: the intent cycle
// runs once, and any failure rolls it back and returns an *UnavailableError,
// with nothing written; the caller (the client) may re-submit, which the
// intent ID makes safe.
//
// # Errors
//
// Submit returns, for the server to map:
//
//   - *intents.InvalidError, or an error wrapping intents.ErrUnknownIntentType:
//     the request is at fault (400);
//   - *intents.EvalError: the handler failed to evaluate, deterministically
//     (422) — a CEL error, the cost limit, a read the database refuses for
//     the handler's own reasons (an undefined table or column, a type
//     mismatch), an emitted event that is not a valid envelope;
//   - *UnavailableError: PostgreSQL failed (503).
//
// Neighbours: package intentapi's server submits through it, and package
// app builds it on the process's pool (the bench, too). Below, it uses
// intents (the Decider, Intent and its errors), event (the envelopes),
// internal/pgerr (a read's failure: the database's or the handler's) and
// internal/backoff; its tables are internal/schema's.
package ledger
