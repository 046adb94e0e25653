// Package pgerr tells a lost or refused PostgreSQL connection from an error
// of the statement itself (Connection): connect and network errors, io.EOF,
// timeouts and cancellations, errors pgconn deems safe to retry, SQLSTATE
// class 08 and the server's shutdown and too-many-connections codes.
//
// Neighbours: a leaf. The projection engine classifies apply failures with
// it (connection vs sql) and the write path's ledger the failures of a
// handler's reads (the database's vs the handler's), so both sides of the
// system agree on what an outage of the database is. It imports no project
// package.
package pgerr
