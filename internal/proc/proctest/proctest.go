package proctest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TempRoot points TMPDIR at a fresh directory (readable by the postgres
// user) for the rest of the test, so the test can check that everything
// started under it left nothing behind. The directory is removed at the end.
func TempRoot(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Setenv("TMPDIR", dir)
	return dir
}

// Alive reports whether process pid exists and has not exited (a zombie has).
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3 is the state; a zombie (Z) has exited.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// Mentioning returns the PIDs of live processes whose command line contains s.
func Mentioning(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}
