// Package parking is the PostgreSQL store of entity ordering
// (CAUSET_ORDERING=entity): the blocked keys of each partition with their
// head — the retry workflow of the key's failed event, or the incident that
// holds it — and the key's later events, parked in order behind it
// (causet_blocked_keys, causet_parked_events).
//
// The bridge (package starter) blocks keys and parks events in the
// transaction of the batch they belong to, and releases them, in order and
// in runs, once the head has settled; the worker (package activities)
// records where a head stands as it settles: in the apply transaction of
// its successful attempt, before its dead letter is published, and as an
// incident stops holding. The tables are created by package schema.
package parking
