// Package securitytest checks the service's security promises from the
// outside: no secret from DATABASE_URL, KAFKA_SASL_PASSWORD or
// TEMPORAL_API_KEY in the output of the causet binary (built from
// cmd/causet) when the services it names are unreachable or refuse it, and
// SQL injection through payload values or IR identifiers has no SQL effect.
//
// It is test code only. Neighbours: a command-layer package that nothing
// imports; its tests run the binary and the projection engine on
// internal/testenv's PostgreSQL with the example projections.
package securitytest
