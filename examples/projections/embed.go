package exampleprojections

import (
	"embed"

	"github.com/causet/projection-retry/examples/internal/exampledocs"
)

// FS holds NAME.yaml and NAME.sql for every example.
//
//go:embed *.yaml *.sql
var FS embed.FS

// Names returns the example names (artist_followers, artist_stats), sorted.
func Names() []string { return exampledocs.Names(FS) }

// Document returns the IR document NAME.yaml.
func Document(name string) ([]byte, error) { return exampledocs.Document(FS, name) }

// DDL returns the table DDL NAME.sql.
func DDL(name string) (string, error) {
	b, err := FS.ReadFile(name + ".sql")
	return string(b), err
}
