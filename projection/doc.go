// Package projection turns events into PostgreSQL writes as described by
// projection IR documents, and keeps the deployed IR versions and the dedupe
// ledger in PostgreSQL.
//
// # IR documents
//
// An IR document (YAML or JSON) looks like this:
//
//	name: artist_followers        # projection name, a plain SQL identifier
//	version: 1                    # informational; the deployed version is assigned by Deploy
//	source_events: [ARTIST_FOLLOWED, ARTIST_UNFOLLOWED]
//	table: artist_followers       # target table (DDL is the user's)
//	key: [user_id, artist_id]     # the table's primary key / unique columns
//	on:
//	  ARTIST_FOLLOWED:
//	    op: upsert
//	    columns:                  # column: CEL expression over `event`
//	      user_id: event.entityId
//	      artist_id: event.payload.artistId
//	      followed_at: event.occurredAt
//	  ARTIST_UNFOLLOWED:
//	    op: delete
//	    columns: {user_id: event.entityId, artist_id: event.payload.artistId}
//
// Every event type in source_events has exactly one entry in on, and every
// entry in on is listed in source_events. The operations are:
//
//   - upsert: columns must contain every key column. The row is inserted; on
//     a key conflict the non-key columns are overwritten (a conflict does
//     nothing when only key columns are given).
//   - delete: columns holds exactly the key columns; the row with that key is
//     deleted (deleting a missing row is not an error).
//   - increment: columns must contain every key column and may set other
//     columns like upsert; increment maps columns to numeric CEL expressions
//     whose values are added to the current value (COALESCE(current, 0) +
//     value), or inserted as they are when the row is new.
//
// An increment operation:
//
//	TRACK_PLAYED:
//	  op: increment
//	  columns: {artist_id: event.payload.artistId}
//	  increment: {plays: event.payload.plays}
//
// CEL expressions see one variable, event, of type map(string, dyn): the
// envelope's eventId, eventType, entityId, forkId, intentId, sequence,
// occurredAt (a timestamp, absent when the envelope has none) and payload.
// Integral JSON numbers are ints, so event.payload.plays / event.payload.days
// fails with "division by zero" when days is 0; a missing key fails with
// "no such key: x". Both are ir_eval errors.
//
// Each evaluation of an expression may spend a CEL cost limit
// (DefaultCostLimit, or WithCostLimit); one that goes past it fails with
// "CEL cost limit N exceeded", an ir_eval error. Validate (and so Parse and
// Deploy) rejects an expression whose worst-case cost over any valid
// envelope is over the limit: comprehensions over payload lists and maps,
// and operations whose cost is the product of two payload sizes such as
// event.payload.a.contains(event.payload.b).
//
// Results are converted for PostgreSQL: int → int64, uint → uint64, double →
// float64, string, bool, bytes → []byte, timestamp → time.Time, null → NULL,
// maps and lists → JSON text. A value bound to a json/jsonb column is always
// JSON-encoded; a non-string value bound to a text column is formatted as text.
//
// Identifiers (name, table, columns) must match ^[a-z_][a-z0-9_]{0,62}$ and
// are quoted in SQL; every value is a bind parameter.
package projection
