// Package exampleprojections embeds the example projection IR documents
// (NAME.yaml: artist_followers, artist_stats) and the DDL of their tables
// (NAME.sql), for `causet dev` and tests. The documents are also the ones
// docs and `causet projections validate|deploy` point at; their events are
// emitted by the example intent handlers of examples/intents.
//
// Neighbours: a record. Package devstack creates the tables and deploys the
// documents for `causet dev`, the bench deploys them for its write-path
// phase, and the tests of many packages (projection, starter, activities,
// the reliability suite, …) apply them. Below, it uses
// examples/internal/exampledocs to list and read the files.
package exampleprojections
