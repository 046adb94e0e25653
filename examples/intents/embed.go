package exampleintents

import (
	"embed"

	"github.com/causet/projection-retry/examples/internal/exampledocs"
)

// FS holds INTENT_TYPE.yaml for every example.
//
//go:embed *.yaml
var FS embed.FS

// Names returns the example intent types (FollowArtist, PlayTrack,
// UnfollowArtist), sorted.
func Names() []string { return exampledocs.Names(FS) }

// Document returns the handler document INTENT_TYPE.yaml.
func Document(intentType string) ([]byte, error) { return exampledocs.Document(FS, intentType) }
