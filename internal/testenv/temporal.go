package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/causet/projection-retry/internal/proc"
)

// TemporalCLIVersion is the temporal CLI that `make tools` installs into ./bin.
const TemporalCLIVersion = "v1.5.1"

// SearchAttributes are the custom Keyword search attributes the dev server is
// started with (and that are added to an external TEMPORAL_ADDRESS server if
// missing). The canonical names live in package workflows.
var SearchAttributes = proc.SearchAttributes

const temporalHowTo = "run `make tools` to install the temporal CLI into ./bin, or set TEMPORAL_ADDRESS"

// TemporalServer is a Temporal frontend a test can use.
type TemporalServer struct {
	// HostPort is the frontend gRPC address (host:port).
	HostPort string
	// Namespace is the namespace to use ("default" on the dev server).
	Namespace string
	// Client is connected to HostPort/Namespace; it is closed when the test ends.
	Client client.Client
	// MetricsURL is a dev server's own Prometheus endpoint ("" for a
	// TEMPORAL_ADDRESS server).
	MetricsURL string

	cli string // temporal CLI path, may be empty
}

// Temporal returns a Temporal frontend and a client for it. With
// TEMPORAL_ADDRESS set that server is used (namespace TEMPORAL_NAMESPACE,
// default "default"); otherwise one in-memory dev server (`temporal server
// start-dev`) is started per test binary with the [SearchAttributes]
// registered. Tests must not assume they are alone on it: use unique
// workflow IDs and task queues (see [TaskQueue]).
func Temporal(t testing.TB) TemporalServer {
	t.Helper()
	var hostPort, ns, metricsURL string
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		hostPort = addr
		ns = os.Getenv("TEMPORAL_NAMESPACE")
		if ns == "" {
			ns = "default"
		}
	} else {
		s := devServer(t)
		hostPort, ns, metricsURL = s.HostPort, s.Namespace, s.MetricsURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  hostPort,
		Namespace: ns,
		Logger:    quietTemporalLogger(),
	})
	if err != nil {
		unavailable(t, "cannot connect to Temporal at %s: %v\n%s", hostPort, err, temporalHowTo)
	}
	t.Cleanup(c.Close)
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		ensureSearchAttributes(t, c, ns)
	}
	cli, _ := proc.FindTemporalCLI()
	return TemporalServer{HostPort: hostPort, Namespace: ns, Client: c, MetricsURL: metricsURL, cli: cli}
}

// TemporalServerAt is the server at hostPort, namespace ns, that c talks
// to (a cluster a test dialled itself), with this repository's temporal
// CLI for CLI.
func TemporalServerAt(hostPort, ns string, c client.Client) TemporalServer {
	cli, _ := proc.FindTemporalCLI()
	return TemporalServer{HostPort: hostPort, Namespace: ns, Client: c, cli: cli}
}

// TemporalWithLimits starts a dev server of the test's own with the given
// dynamic config (server limits scaled down, say) and returns a client for
// it; the server stops when the test ends. Use it only for tests of
// Temporal's limits: each such server costs seconds to start.
func TemporalWithLimits(t testing.TB, dynamicConfig map[string]string) TemporalServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := proc.StartTemporal(ctx, proc.TemporalOptions{Headless: true, DynamicConfig: dynamicConfig})
	if err != nil {
		unavailable(t, "no Temporal dev server: %v\n%s", err, temporalHowTo)
	}
	t.Cleanup(func() {
		s.Halt()
		s.Stop()
	})
	c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Namespace: s.Namespace, Logger: quietTemporalLogger()})
	if err != nil {
		t.Fatalf("connect to the dev server at %s: %v", s.HostPort, err)
	}
	t.Cleanup(c.Close)
	return TemporalServer{HostPort: s.HostPort, Namespace: s.Namespace, Client: c, MetricsURL: s.MetricsURL, cli: s.CLI}
}

// CLI runs the temporal CLI (./bin/temporal of this repository, else
// `temporal` on PATH) with args followed by --address and --namespace for this
// server, and returns its stdout. On failure the error carries stderr. Example:
//
//	out, err := srv.CLI("workflow", "list", "--query", `CausetRetryState="dead_lettered"`, "-o", "json")
func (s TemporalServer) CLI(args ...string) (string, error) {
	if s.cli == "" {
		return "", errors.New("temporal CLI not found: " + temporalHowTo)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append(append([]string{}, args...), "--address", s.HostPort, "--namespace", s.Namespace)
	cmd := exec.CommandContext(ctx, s.cli, full...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+s.HostPort, "TEMPORAL_NAMESPACE="+s.Namespace)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("temporal %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.String(), nil
}

// TaskQueue returns a task queue name unique to this test run, so workers of
// different tests on a shared server never steal each other's tasks.
func TaskQueue(t testing.TB) string {
	return uniqueName(t, "tq", "-", 200)
}

// StopTemporal kills the dev server (SIGKILL to its process group) so a test
// can observe a Temporal outage. [StartTemporal] restarts it on the same ports,
// but the dev server is in memory: every workflow, history and
// namespace-level setting is lost (the search attributes are re-registered by
// the start flags). If the test does not restart it, it is restarted when the
// test ends. Skips when TEMPORAL_ADDRESS is set.
func StopTemporal(t testing.TB) {
	t.Helper()
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		t.Skip("testenv: StopTemporal needs the dev server; TEMPORAL_ADDRESS is set, so the server cannot be stopped")
	}
	s := devServer(t)
	s.Halt()
	t.Cleanup(func() {
		if err := s.Resume(context.Background()); err != nil {
			t.Errorf("testenv: restart temporal dev server after test: %v", err)
		}
	})
}

// StartTemporal restarts a dev server stopped by [StopTemporal] (no-op if it
// is running) and waits until its frontend is healthy. State from before the
// stop is gone (in-memory server).
func StartTemporal(t testing.TB) {
	t.Helper()
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		t.Skip("testenv: StartTemporal needs the dev server; TEMPORAL_ADDRESS is set")
	}
	if err := devServer(t).Resume(context.Background()); err != nil {
		t.Fatalf("testenv: start temporal dev server: %v", err)
	}
}

func quietTemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func ensureSearchAttributes(t testing.TB, c client.Client, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Logf("testenv: cannot list search attributes on %s (tests that need them may fail): %v", ns, err)
		return
	}
	missing := map[string]enums.IndexedValueType{}
	for _, name := range SearchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			missing[name] = enums.INDEXED_VALUE_TYPE_KEYWORD
		}
	}
	for _, name := range proc.IntSearchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			missing[name] = enums.INDEXED_VALUE_TYPE_INT
		}
	}
	if len(missing) == 0 {
		return
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	}); err != nil {
		t.Logf("testenv: cannot add search attributes %v on %s: %v", missing, ns, err)
	}
}

var devState struct {
	once sync.Once
	s    *proc.Temporal
	err  error
}

func devServer(t testing.TB) *proc.Temporal {
	t.Helper()
	devState.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		s, err := proc.StartTemporal(ctx, proc.TemporalOptions{Headless: true})
		if err != nil {
			devState.err = err
			return
		}
		devState.s = s
		onTeardown(func() {
			s.Halt() // SIGKILL: the server is in memory, nothing to flush
			s.Stop()
		})
	})
	if devState.err != nil {
		unavailable(t, "no Temporal dev server: %v\n%s", devState.err, temporalHowTo)
	}
	return devState.s
}
