// Package parking is the PostgreSQL store of entity ordering
// (CAUSET_ORDERING=entity): the blocked keys of each partition with their
// head — the retry workflow of the key's failed event, or the incident that
// holds it — and the key's later events, parked in order behind it
// (causet_blocked_keys, causet_parked_events). It owns the functions that
// change them inside a caller's transaction: Block, Park, Unpark, Unblock
// and SetHeadState.
//
// The bridge (package starter) blocks keys and parks events in the
// transaction of the batch they belong to, and releases them, in order and
// in runs, once the head has settled. The worker (package activities)
// records where a retry head stands as it settles: in the apply transaction
// of its successful attempt, once its dead letter is published, and when
// it is discarded or its replay window ends. The incident store (package
// incident) moves the heads of an incident's keys in the transaction that
// changes the incident's state. `causet blocked` (cmd/causet) lists the
// blocked keys, and package app builds the store.
//
// Below, this package uses only contract. The tables are created by the
// migrations of package internal/schema.
package parking
