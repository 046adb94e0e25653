// Package catalog holds what the PostgreSQL stores of versioned documents
// share: the advisory lock class, the tables of projection IR documents and
// intent handler documents deployed as version N+1 and listed newest first
// (Versions, LoadLatest, List), and the one change-notification design: a
// deploy NOTIFYs its kind's channel in its transaction, and Versions.Watch
// LISTENs on a connection of its own, refreshing a cache after each
// (re)connect and on each notification, and optionally every interval.
//
// Neighbours: package projection (its engine's cache) and package intents
// (its handler catalog) use it; the tables are created by the migrations of
// package schema.
package catalog
