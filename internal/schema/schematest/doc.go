// Package schematest holds, for tests, a database as the release before
// versioned migrations left it (testdata/README.md says how it was made)
// and the dead letters that release published with it: LoadBeforeMigrations
// restores that database into a pool, DeadLetters reads the records.
//
// Neighbours: a leaf used only by tests — internal/schema's, which migrate
// that database, and app's upgrade test, which runs the service on it. It
// imports no project package.
package schematest
