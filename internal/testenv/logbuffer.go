package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// LogBuffer is a goroutine-safe sink for a test's log handler (usually
// slog.NewJSONHandler), with readers of the JSON lines logged so far.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines decodes every line logged so far; a line that is not a JSON object
// fails the test.
func (b *LogBuffer) Lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("testenv: log line is not JSON: %v: %s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// Where returns the decoded lines whose field key is value (e.g. "msg" or
// "event").
func (b *LogBuffer) Where(t testing.TB, key string, value any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range b.Lines(t) {
		if m[key] == value {
			out = append(out, m)
		}
	}
	return out
}

// Containing returns the decoded JSON lines whose text contains s; lines
// that are not JSON are skipped.
func (b *LogBuffer) Containing(s string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		if !strings.Contains(l, s) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
