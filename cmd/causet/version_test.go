package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/release"
	"github.com/causet/projection-retry/internal/schema"
)

// A dev build names itself after the last release it is past, with its
// commit (the toolchain's VCS stamp) and the schema it runs on.
func TestVersionOfADevBuild(t *testing.T) {
	rs := release.Releases()
	bin := filepath.Join(t.TempDir(), "causet")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	stdout, stderr, code := runBinary(t, nil, "version")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "causet "+rs[len(rs)-1].Version+"+dev\n", "a build without a VCS stamp: %s", stdout)

	o, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	lines := strings.Split(string(o), "\n")
	require.Regexp(t, `^causet \d+\.\d+\.\d+(\+dev)?$`, lines[0])
	require.Regexp(t, `^commit: +[0-9a-f]{40}`, lines[1], "the toolchain's VCS stamp")
	require.Contains(t, string(o), "library:   go.temporal.io/sdk v1.")
	require.Contains(t, string(o), fmt.Sprintf("schema:    needs version %d;", schema.Latest()))
}

// A release build is stamped (make release): the version, commit and date
// it was given.
func TestVersionOfAReleaseBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "causet")
	pkg := "github.com/causet/projection-retry/internal/release"
	ldflags := fmt.Sprintf("-X %s.Version=9.8.7 -X %s.Commit=%s -X %s.Date=2026-12-06T00:00:00Z", pkg, pkg, strings.Repeat("ab", 20), pkg)
	out, err := exec.Command("go", "build", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	o, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(o), "causet 9.8.7\ncommit:    "+strings.Repeat("ab", 20)+"\nbuilt:     2026-12-06T00:00:00Z\n"), "%s", o)
}
