// Package exampleintents embeds the example intent handler documents
// (INTENT_TYPE.yaml), whose events the example projections in
// examples/projections apply, for `causet dev` and tests.
package exampleintents

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

// FS holds INTENT_TYPE.yaml for every example.
//
//go:embed *.yaml
var FS embed.FS

// Names returns the example intent types (FollowArtist, PlayTrack,
// UnfollowArtist), sorted.
func Names() []string {
	files, _ := fs.Glob(FS, "*.yaml")
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, strings.TrimSuffix(f, ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Document returns the handler document INTENT_TYPE.yaml.
func Document(intentType string) ([]byte, error) { return FS.ReadFile(intentType + ".yaml") }
