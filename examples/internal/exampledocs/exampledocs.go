package exampledocs

import (
	"io/fs"
	"sort"
	"strings"
)

// Names returns the example names (the NAME of every NAME.yaml in fsys),
// sorted.
func Names(fsys fs.FS) []string {
	files, _ := fs.Glob(fsys, "*.yaml")
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, strings.TrimSuffix(f, ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Document returns the document NAME.yaml of fsys.
func Document(fsys fs.FS, name string) ([]byte, error) { return fs.ReadFile(fsys, name+".yaml") }
