package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/causet/projection-retry"

// Layer of each package, by its path in the module (a prefix ending in "/"
// covers a subtree). Lower layers never import higher ones.
const (
	leaves   = iota // internal/…: focused helpers, importing only each other
	records         // the values everything passes around
	parts           // engines, stores and clients of one concern each
	roles           // what runs on Temporal and Kafka
	assembly        // the service put together
	commands        // the binary, the bench and the suites that drive it whole
)

var layerNames = []string{"leaves", "records", "parts", "roles", "assembly", "commands"}

var layerOf = map[string]int{
	"internal/": leaves,

	"event": records, "config": records, "contract": records, "payloadcodec": records, "examples/": records,

	"projection": parts, "intents": parts, "ledger": parts, "parking": parts, "dlq": parts,
	"incident": parts, "relay": parts, "client": parts,

	"workflows": roles, "activities": roles, "starter": roles, "worker": roles, "intentapi": roles, "rollout": roles,

	"app": assembly, "devstack": assembly,

	"cmd/causet": commands, "bench": commands, "reliability": commands, "securitytest": commands,
	"deployments": commands, "deployments/": commands,
}

// forbidden are imports the layers allow but the design does not: the
// retry workflow and the activities meet only in package contract, and the
// write path does not reach into the read path's engine.
var forbidden = map[[2]string]string{
	{"activities", "workflows"}: "Temporal inputs and outputs live in package contract",
	{"workflows", "activities"}: "Temporal inputs and outputs live in package contract",
	{"intents", "projection"}:   "the write path shares only internal leaves with the projection engine",
	{"ledger", "projection"}:    "the write path shares only internal leaves with the projection engine",
	{"intentapi", "projection"}: "the write path shares only internal leaves with the projection engine",
}

// layer is the layer of the package at rel: its own entry, else the
// longest subtree entry holding it.
func layer(rel string) (int, bool) {
	if l, ok := layerOf[rel]; ok {
		return l, true
	}
	l, longest := 0, 0
	for prefix, pl := range layerOf {
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(rel, prefix) && len(prefix) > longest {
			l, longest = pl, len(prefix)
		}
	}
	return l, longest > 0
}

// listed is what the check reads of a package: the imports of its
// non-test files. Tests stand outside the graph: an end-to-end test in a
// lower package may run a worker or a bridge above it.
type listed struct {
	ImportPath string
	Imports    []string
}

// packages is `go list -json ./...` of the module.
func packages(t *testing.T) []listed {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err, "go list -m")
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	require.NoError(t, err, "go list -json ./...")
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		require.NoError(t, dec.Decode(&p))
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

func TestImportsPointDown(t *testing.T) {
	var problems []string
	for _, p := range packages(t) {
		from := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		lf, ok := layer(from)
		if !ok {
			problems = append(problems, from+": in no layer (add it to layerOf and to docs/ARCHITECTURE.md's picture)")
			continue
		}
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok || to == from {
				continue
			}
			lt, ok := layer(to)
			if !ok {
				continue // reported as the importer of its own
			}
			if lt > lf {
				problems = append(problems, from+" ("+layerNames[lf]+") imports "+to+" ("+layerNames[lt]+"): up a layer")
			}
			if why, bad := forbidden[[2]string{from, to}]; bad {
				problems = append(problems, from+" imports "+to+": "+why)
			}
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems)
}

// The check's own map: entries and subtrees place packages, and a new
// package in none is reported rather than placed by default.
func TestLayerOfPlacesEveryKindOfPath(t *testing.T) {
	for rel, want := range map[string]int{
		"internal/backoff": leaves, "internal/schema/schematest": leaves, "examples/internal/exampledocs": records,
		"contract": records, "starter": roles, "app": assembly, "deployments/kubernetes": commands,
	} {
		got, ok := layer(rel)
		require.True(t, ok, rel)
		require.Equal(t, layerNames[want], layerNames[got], rel)
	}
	_, ok := layer("newpackage")
	require.False(t, ok, "a package in no layer is reported, not placed by default")
}
