package main

import (
	"fmt"
	"os"

	"github.com/causet/projection-retry/internal/release"
	"github.com/causet/projection-retry/internal/schema"
)

type versionCmd struct{}

func (versionCmd) Run() error {
	out := os.Stdout
	b := release.Current()
	commit := b.Commit
	switch {
	case commit == "":
		commit = "unknown (built without VCS information)"
	case b.Modified:
		commit += " (with changes not committed)"
	}
	date := b.Date
	switch {
	case date == "":
		date = "unknown"
	case !b.Stamped:
		date += " (the commit's time: not a release build)"
	}
	latest := schema.Latest()
	fmt.Fprintf(out, "causet %s\n", b.Version)
	fmt.Fprintf(out, "commit:    %s\n", commit)
	fmt.Fprintf(out, "built:     %s\n", date)
	fmt.Fprintf(out, "go:        %s\n", b.Go)
	for _, dep := range []string{"go.temporal.io/sdk", "github.com/twmb/franz-go", "github.com/jackc/pgx/v5"} {
		fmt.Fprintf(out, "%-10s %s %s\n", "library:", dep, b.Deps[dep])
	}
	fmt.Fprintf(out, "schema:    needs version %d; runs on %d and on any newer schema whose migrations past %d are all expand steps (docs/UPGRADES.md)\n",
		latest, latest, latest)
	return nil
}
