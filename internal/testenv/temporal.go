package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// TemporalCLIVersion is the temporal CLI that `make tools` installs into ./bin.
const TemporalCLIVersion = "v1.5.1"

// SearchAttributes are the custom Keyword search attributes the dev server is
// started with (and that are added to an external TEMPORAL_ADDRESS server if
// missing). The canonical names live in package workflows.
var SearchAttributes = []string{
	"CausetProjection",
	"CausetEventType",
	"CausetEntityId",
	"CausetForkId",
	"CausetRetryState",
}

const temporalHowTo = "run `make tools` to install the temporal CLI into ./bin, or set TEMPORAL_ADDRESS"

// TemporalServer is a Temporal frontend a test can use.
type TemporalServer struct {
	// HostPort is the frontend gRPC address (host:port).
	HostPort string
	// Namespace is the namespace to use ("default" on the dev server).
	Namespace string
	// Client is connected to HostPort/Namespace; it is closed when the test ends.
	Client client.Client

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
	var hostPort, ns string
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		hostPort = addr
		ns = os.Getenv("TEMPORAL_NAMESPACE")
		if ns == "" {
			ns = "default"
		}
	} else {
		s := devServer(t)
		hostPort, ns = s.hostPort, "default"
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
	cli, _ := temporalCLI()
	return TemporalServer{HostPort: hostPort, Namespace: ns, Client: c, cli: cli}
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
	s.stop()
	t.Cleanup(func() {
		if err := s.start(); err != nil {
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
	if err := devServer(t).start(); err != nil {
		t.Fatalf("testenv: start temporal dev server: %v", err)
	}
}

func quietTemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// temporalCLI finds ./bin/temporal in the repository root, else `temporal` on PATH.
func temporalCLI() (string, error) {
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, "bin", "temporal")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", errors.New("temporal CLI not found in ./bin or on PATH")
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
	if len(missing) == 0 {
		return
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	}); err != nil {
		t.Logf("testenv: cannot add search attributes %v on %s: %v", missing, ns, err)
	}
}

type tempDev struct {
	mu       sync.Mutex
	cli      string
	dir      string
	logFile  string
	hostPort string
	args     []string
	cmd      *exec.Cmd
	exited   chan struct{}
}

var devState struct {
	once sync.Once
	s    *tempDev
	err  error
}

func devServer(t testing.TB) *tempDev {
	t.Helper()
	devState.once.Do(func() { devState.s, devState.err = startDevServer() })
	if devState.err != nil {
		unavailable(t, "no Temporal dev server: %v\n%s", devState.err, temporalHowTo)
	}
	return devState.s
}

func startDevServer() (*tempDev, error) {
	cli, err := temporalCLI()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "causet-temporal-")
	if err != nil {
		return nil, err
	}
	s := &tempDev{cli: cli, dir: dir, logFile: filepath.Join(dir, "temporal.log")}
	onTeardown(func() {
		s.stop()
		_ = os.RemoveAll(dir)
	})
	var lastErr error
	for range 3 { // a probed free port can be taken before the server binds it
		ports, err := freePorts(4)
		if err != nil {
			return nil, err
		}
		s.hostPort = "127.0.0.1:" + strconv.Itoa(ports[0])
		s.args = []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1",
			"--port", strconv.Itoa(ports[0]), "--http-port", strconv.Itoa(ports[1]),
			"--metrics-port", strconv.Itoa(ports[2]), "--ui-port", strconv.Itoa(ports[3]),
			"--log-level", "warn"}
		for _, sa := range SearchAttributes {
			s.args = append(s.args, "--search-attribute", sa+"=Keyword")
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *tempDev) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.cli, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so stop can kill everything it spawned; die with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.cli, err)
	}
	pgid := cmd.Process.Pid
	stopWatchdog := watchdog(fmt.Sprintf("kill -KILL -%d 2>/dev/null; rm -rf %s", pgid, shellQuote(s.dir)))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); stopWatchdog(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("temporal dev server exited during start-up (%s):\n%s", s.logFile, tail(s.logFile, 30))
		default:
		}
		if err := s.healthy(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("temporal dev server on %s not healthy after 60s: %v\n%s", s.hostPort, err, tail(s.logFile, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healthy dials the frontend and checks health and the default namespace.
func (s *tempDev) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: s.hostPort, Namespace: "default", Logger: quietTemporalLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"}); err != nil {
		return err
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		return err
	}
	for _, name := range SearchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			return fmt.Errorf("search attribute %s not registered yet", name)
		}
	}
	return nil
}

func (s *tempDev) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *tempDev) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
	s.cmd = nil
}
