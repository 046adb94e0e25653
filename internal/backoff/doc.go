// Package backoff is the capped exponential backoff with jitter that every
// wait on a dependency in the service uses: Backoff (Min, doubling to Max,
// each wait spread by ±20%), Jitter, and Sleep, a wait that ends with its
// context.
//
// Neighbours: a leaf. The bridge's retrier (starter), the outbox relay, the
// ledger's tries, the client's waits between re-submissions, the catalog's
// LISTEN reconnects (internal/catalog), the process start-up polls
// (internal/proc, devstack) and the bench use it; it imports no project
// package.
package backoff
