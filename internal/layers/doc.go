// Package layers holds the check, run by go test, that the module's imports
// point down the layers docs/ARCHITECTURE.md draws: leaves (internal/…),
// records, parts, roles, assembly, commands. It has no code of its own.
package layers
