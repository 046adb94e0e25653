// Package schema owns the PostgreSQL schema of every table the project
// keeps: the write path's ledger and intent handlers, the projection IR
// versions and catalog, the dedupe ledger, incidents and the bridge's
// ordering state. It holds the numbered migrations (migrations/*.sql, in
// goose's format, embedded in the binary), applies them with
// github.com/pressly/goose/v3 under a session-level advisory lock (Up),
// reports a database's version and pending migrations without writing
// (Version, Status) and checks a process's database at start (Check).
//
// Migration 1 is the schema of the release before versioned migrations,
// written so that it adopts a database that release created. Every later
// change is the next number; migrations are forward-only. The read models'
// own tables are the user's (their DDL ships with their IR documents); the
// dedupe ledger's hour partitions are created and dropped by its maintenance
// (projection.MaintainDedupe) as time passes, not by migrations.
//
// Neighbours: a leaf that imports no project package. Package app runs
// Check in every process once its pool answers; `causet migrate
// up|status|sql` (cmd/causet) is the operator's side; internal/testenv
// migrates the template every test database is copied from, and the bench
// its own databases. The tables' users (projection, ledger, intents,
// parking, incident, internal/catalog) create none of their own.
// internal/schema/schematest holds the database of the release before
// versioned migrations, for the upgrade tests.
package schema
