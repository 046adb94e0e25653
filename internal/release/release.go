// Package release names a build: its version, commit and build date, and
// the releases of the project (releases.tsv, embedded).
//
// A release build (make release) stamps Version, Commit and Date with
// -ldflags -X. Any other build takes its commit from the Go toolchain's VCS
// stamp (go build in a git checkout) and is the release recorded for that
// commit, or, past the last release, "<last release>+dev".
//
// Neighbours: a leaf that imports no project package; cmd/causet prints
// it (`causet version`), and scripts/release.sh reads releases.tsv to name
// the commit it builds.
package release

import (
	_ "embed"
	"fmt"
	"runtime/debug"
	"strings"
)

// Stamped by a release build (-ldflags "-X …/internal/release.Version=…").
var (
	Version string
	Commit  string
	Date    string
)

//go:embed releases.tsv
var releasesTSV string

// Release is one recorded release.
type Release struct {
	Version, Commit, Date string
}

// Releases returns the recorded releases, oldest first.
func Releases() []Release {
	out, err := parse(releasesTSV)
	if err != nil {
		// The file is embedded and checked by the package's tests.
		panic(err)
	}
	return out
}

func parse(tsv string) ([]Release, error) {
	var out []Release
	for i, line := range strings.Split(tsv, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || len(f[1]) != 40 {
			return nil, fmt.Errorf("release: releases.tsv line %d: want version, 40-hex commit and date, tab-separated: %q", i+1, line)
		}
		out = append(out, Release{Version: f[0], Commit: f[1], Date: f[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("release: releases.tsv records no release")
	}
	return out, nil
}

// Build is what a binary knows of itself.
type Build struct {
	// Version: the stamped one, the release of Commit, or "<last>+dev".
	Version string
	// Commit is the VCS revision ("" when the build has none); Modified
	// says the tree had changes not committed.
	Commit   string
	Modified bool
	// Date is the build date of a release build (Stamped), else the
	// commit's time.
	Date    string
	Stamped bool
	// Go is the toolchain; Deps the versions of the modules that matter to
	// an operator (Temporal SDK, franz-go, pgx).
	Go   string
	Deps map[string]string
}

// Current describes this binary.
func Current() Build {
	b := Build{Version: Version, Commit: Commit, Date: Date, Stamped: Version != "", Deps: map[string]string{}}
	info, ok := debug.ReadBuildInfo()
	if ok {
		b.Go = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		for _, d := range info.Deps {
			switch d.Path {
			case "go.temporal.io/sdk", "github.com/twmb/franz-go", "github.com/jackc/pgx/v5":
				b.Deps[d.Path] = d.Version
			}
		}
	}
	if b.Version == "" {
		b.Version = versionOf(Releases(), b.Commit, b.Modified)
	}
	return b
}

// versionOf names a build that was not stamped: the release cut from its
// commit (unmodified), else the last release with "+dev".
func versionOf(rs []Release, commit string, modified bool) string {
	for _, r := range rs {
		if commit != "" && r.Commit == commit && !modified {
			return r.Version
		}
	}
	return rs[len(rs)-1].Version + "+dev"
}
