package doclinks

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// link is a markdown inline link's target: [text](target "title").
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// root is the repository, two directories up.
const root = "../.."

// skipped are directories whose markdown is not the project's.
var skipped = map[string]bool{".git": true, ".cache": true, "bin": true, "dist": true, "node_modules": true}

// markdownFiles are the repository's .md files, relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipped[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	}))
	return files
}

// anchors are the fragments GitHub gives the headings of a markdown file:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		a := slug(strings.TrimLeft(line, "#"))
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	require.NoError(t, sc.Err())
	return out
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link of every markdown file names a file that exists, and
// a heading of it when it has a fragment.
func TestEveryRelativeLinkResolves(t *testing.T) {
	files := markdownFiles(t)
	require.NotEmpty(t, files)
	cache := map[string]map[string]bool{}
	var broken []string
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		fenced := false
		for n, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(file), path))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						broken = append(broken, file+":"+strconv.Itoa(n+1)+": "+target+" (no such file)")
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if cache[dest] == nil {
					cache[dest] = anchors(t, dest)
				}
				if !cache[dest][frag] {
					broken = append(broken, file+":"+strconv.Itoa(n+1)+": "+target+" (no such heading)")
				}
			}
		}
	}
	require.Empty(t, broken, "links that do not resolve")
}
