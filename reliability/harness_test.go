package reliability

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ---------------------------------------------------------------- gate

type profile string

const (
	profileShort profile = "short"
	profileFull  profile = "full"
)

// gate skips the test unless the suite is enabled and returns the profile.
func gate(t *testing.T) profile {
	t.Helper()
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY")))
	p := strings.ToLower(strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY_PROFILE")))
	if v == "" || v == "0" || v == "false" {
		if p == "" {
			t.Skip("reliability suite is heavy (kills, outages, 50,000 events): set CAUSET_RELIABILITY=1 " +
				"(or CAUSET_RELIABILITY_PROFILE=short|full), or run scripts/reliability.sh / make reliability")
		}
	}
	switch {
	case p == "short" || p == "full":
		return profile(p)
	case v == "short":
		return profileShort
	default:
		return profileFull
	}
}

// pick returns short or full by profile.
func pick[T any](p profile, short, full T) T {
	if p == profileShort {
		return short
	}
	return full
}

// ordering is the bridge's CAUSET_ORDERING for a scenario run.
type ordering string

const (
	// orderingEntity is the default: CAUSET_ORDERING is left unset.
	orderingEntity ordering = "entity"
	orderingNone   ordering = "none"
)

// forOrderings runs scenario once per ordering, as subtests named "entity"
// and "none". The short profile runs only the orderings in short;
// CAUSET_RELIABILITY_ORDERINGS (e.g. "none" or "entity,none") overrides the
// profile's choice.
func forOrderings(t *testing.T, p profile, short []ordering, scenario func(t *testing.T, o ordering)) {
	want := []ordering{orderingEntity, orderingNone}
	if p == profileShort {
		want = short
	}
	if v := strings.TrimSpace(os.Getenv("CAUSET_RELIABILITY_ORDERINGS")); v != "" {
		want = nil
		for _, f := range strings.Split(v, ",") {
			want = append(want, ordering(strings.TrimSpace(f)))
		}
	}
	for _, o := range []ordering{orderingEntity, orderingNone} {
		t.Run(string(o), func(t *testing.T) {
			if !slices.Contains(want, o) {
				t.Skipf("ordering %s is not in this profile (full profile, or CAUSET_RELIABILITY_ORDERINGS=%s)", o, o)
			}
			scenario(t, o)
		})
	}
}

// ---------------------------------------------------------------- report

// result collects a scenario's figures and prints the RELIABILITY line.
type result struct {
	t       *testing.T
	name    string
	lost    int
	double  int
	dupWF   int
	figures []string
}

func newResult(t *testing.T, name string) *result {
	r := &result{t: t, name: name}
	t.Cleanup(r.print)
	return r
}

// fig records a figure (key=value) for the RELIABILITY line and the test log.
func (r *result) fig(key string, v any) {
	s := fmt.Sprint(v)
	s = strings.ReplaceAll(s, " ", "_")
	r.figures = append(r.figures, key+"="+s)
	r.t.Logf("%s: %s = %v", r.name, key, v)
}

func (r *result) print() {
	line := fmt.Sprintf("RELIABILITY scenario=%s passed=%t lost=%d double_applied=%d duplicate_workflows=%d",
		r.name, !r.t.Failed() && !r.t.Skipped(), r.lost, r.double, r.dupWF)
	if len(r.figures) > 0 {
		line += " " + strings.Join(r.figures, " ")
	}
	r.t.Log(line)
	fmt.Fprintln(os.Stdout, line)
}

// ---------------------------------------------------------------- binary

var binOnce struct {
	sync.Once
	path string
	err  error
}

// causetBin builds cmd/causet once per test binary (or uses CAUSET_BIN).
func causetBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("CAUSET_BIN"); p != "" {
			binOnce.path = p
			return
		}
		root, err := testenv.RepoRoot()
		if err != nil {
			binOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "causet-reliability-bin-")
		if err != nil {
			binOnce.err = err
			return
		}
		binOnce.path = filepath.Join(dir, "causet")
		cmd := exec.Command("go", "build", "-o", binOnce.path, "./cmd/causet")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			binOnce.err = fmt.Errorf("go build ./cmd/causet: %v\n%s", err, out)
		}
	})
	require.NoError(t, binOnce.err)
	return binOnce.path
}

// quietSlog logs errors only, on stderr: the test's own Temporal clients.
func quietSlog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func quietLogger() tlog.Logger { return tlog.NewStructuredLogger(quietSlog()) }
