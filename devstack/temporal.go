package devstack

import (
	"context"

	"github.com/causet/projection-retry/internal/proc"
)

// SearchAttributes are the custom Keyword search attributes the dev server is
// started with (CONTRACT §6; the canonical names live in package workflows).
var SearchAttributes = proc.SearchAttributes

// ErrNoTemporalCLI is returned when neither ./bin/temporal nor temporal on
// PATH exists. Its message is one line.
var ErrNoTemporalCLI = proc.ErrNoTemporalCLI

// Default ports of `temporal server start-dev`, used when free and
// TemporalOptions.DefaultPorts is set.
const (
	DefaultTemporalPort   = proc.DefaultTemporalPort
	DefaultTemporalUIPort = proc.DefaultTemporalUIPort
)

// FindTemporalCLI returns bin/temporal in the current directory or one of its
// parents (the repository's `make tools` installs it there), else
// bin/temporal or temporal next to this executable, else `temporal` on PATH.
// It returns ErrNoTemporalCLI when there is none.
func FindTemporalCLI() (string, error) { return proc.FindTemporalCLI() }

// TemporalOptions configure StartTemporal (see [proc.TemporalOptions]).
type TemporalOptions = proc.TemporalOptions

// Temporal is a `temporal server start-dev` process (in-memory) with the
// [SearchAttributes] registered (see [proc.Temporal]). Stop it with Stop.
type Temporal = proc.Temporal

// StartTemporal starts `temporal server start-dev --ip 127.0.0.1` in a new
// temp dir (causet-dev-temporal-* unless opts say otherwise) on free ports
// (see TemporalOptions.DefaultPorts) with the Causet search attributes and
// waits until the frontend is healthy, the default namespace exists and the
// search attributes are registered. On error nothing is left behind.
func StartTemporal(ctx context.Context, opts TemporalOptions) (*Temporal, error) {
	if opts.TempDirPrefix == "" {
		opts.TempDirPrefix = "causet-dev-temporal-"
	}
	return proc.StartTemporal(ctx, opts)
}
