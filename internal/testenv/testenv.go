package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causet/projection-retry/internal/proc"
)

// Main runs the tests, then stops every service this test binary started
// (PostgreSQL cluster, Temporal dev server), removes their temp dirs and exits
// with the tests' exit code. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Teardown()
	os.Exit(code)
}

var (
	teardownMu sync.Mutex
	teardowns  []func()
)

func onTeardown(fn func()) {
	teardownMu.Lock()
	defer teardownMu.Unlock()
	teardowns = append(teardowns, fn)
}

// Teardown stops everything started so far, in reverse start order. [Main]
// calls it; call it yourself only if you cannot use Main. It is idempotent.
func Teardown() {
	teardownMu.Lock()
	fns := teardowns
	teardowns = nil
	teardownMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// InCI reports whether CI=true (or 1) is set: then a missing service fails the
// test instead of skipping it.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// Listed reports whether name is one of names or begins with one of
// prefixes, as an environment variable read by name or by family is.
func Listed(name string, names, prefixes []string) bool {
	return slices.Contains(names, name) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := proc.FreePorts(1)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return ports[0]
}

// FreeAddr is FreePort as an address, 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// unavailable skips the test (fails it under CI=true) because a service
// cannot be had.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("testenv: %s (CI=true: a missing service is a failure, not a skip)", msg)
	}
	t.Skipf("testenv: %s", msg)
}

// RepoRoot returns the directory holding go.mod, found by walking up from the
// working directory (go test runs each package in its own directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

var uniq atomic.Int64

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueName makes a lowercase [a-z0-9_] name from prefix and the test name,
// unique within this process and very likely across processes, at most max
// bytes long.
func uniqueName(t testing.TB, prefix, sep string, max int) string {
	base := nonAlnum.ReplaceAllString(strings.ToLower(t.Name()), sep)
	base = strings.Trim(base, sep)
	suffix := fmt.Sprintf("%s%d%s%x", sep, uniq.Add(1), sep, uint32(time.Now().UnixNano())^uint32(os.Getpid())<<16)
	room := max - len(prefix) - len(sep) - len(suffix)
	if room < 0 {
		room = 0
	}
	if len(base) > room {
		base = base[:room]
	}
	return prefix + sep + base + suffix
}
