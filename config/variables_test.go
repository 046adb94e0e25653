package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVariablesCoverWhatLoadReads runs Load with every variable unset and
// requires each name it asks for to be listed.
func TestVariablesCoverWhatLoadReads(t *testing.T) {
	var read []string
	_, err := Load(func(k string) (string, bool) {
		read = append(read, k)
		return "", false
	})
	require.NoError(t, err)
	require.NotEmpty(t, read)
	for _, k := range read {
		if slices.ContainsFunc(removedVariables, func(r struct{ name, instead string }) bool { return r.name == k }) {
			continue // read only to be refused
		}
		require.Contains(t, Variables(), k, "Load reads %s: add it to config/variables.go", k)
	}
	v := Variables()
	v[0] = "CHANGED"
	require.NotEqual(t, "CHANGED", Variables()[0], "Variables returns a copy")
}

// envName is a string literal that names one of the service's variables.
var envName = regexp.MustCompile(`"((?:CAUSET|PROJECTION_WORKER|KAFKA|DATABASE|TEMPORAL)_[A-Z0-9_]+)"`)

// TestVariablesAreTheSourcesNames: the list is exactly the variable names the
// package's source spells out (in parser calls, lookups and constants), so a
// name read only after another is set, or by a loader other than Load, is
// listed too, and a name no longer read is dropped.
func TestVariablesAreTheSourcesNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "variables.go" {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range envName.FindAllStringSubmatch(string(src), -1) {
			found = append(found, m[1])
		}
	}
	slices.Sort(found)
	require.ElementsMatch(t, slices.Compact(found), Variables(),
		"config/variables.go must list exactly the variables the package's source names")
}
