package proc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/causet/projection-retry/internal/backoff"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// SearchAttributes are the custom Keyword search attributes the dev server is
// started with (CONTRACT §6; the canonical names are contract.SearchAttributeNames).
var SearchAttributes = []string{
	"CausetProjection",
	"CausetEventType",
	"CausetEntityId",
	"CausetForkId",
	"CausetRetryState",
	"CausetIncidentState",
	"CausetError",
}

// IntSearchAttributes are the custom Int search attributes the dev server
// is started with (a rollout's progress; contract.IntSearchAttributeNames).
var IntSearchAttributes = []string{
	"CausetRolloutAffected",
	"CausetRolloutApplied",
	"CausetRolloutFailing",
}

// ErrNoTemporalCLI is returned when neither ./bin/temporal nor temporal on
// PATH exists. Its message is one line.
var ErrNoTemporalCLI = errors.New("temporal CLI not found in ./bin or on PATH: run `make tools` to install it into ./bin (or set TEMPORAL_ADDRESS to use a running server)")

// Default ports of `temporal server start-dev`, used when free and
// TemporalOptions.DefaultPorts is set.
const (
	DefaultTemporalPort   = 7233
	DefaultTemporalUIPort = 8233
)

// temporalReadyTimeout bounds how long a (re)started dev server may take to
// become healthy.
const temporalReadyTimeout = 90 * time.Second

// FindTemporalCLI returns bin/temporal in the current directory or one of its
// parents (the repository's `make tools` installs it there), else
// bin/temporal or temporal next to this executable, else `temporal` on PATH.
// It returns ErrNoTemporalCLI when there is none.
func FindTemporalCLI() (string, error) {
	isFile := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if p := filepath.Join(dir, "bin", "temporal"); isFile(p) {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "temporal"); isFile(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", ErrNoTemporalCLI
}

// TemporalOptions configure StartTemporal.
type TemporalOptions struct {
	// CLI is the temporal CLI binary. Optional, defaults to FindTemporalCLI().
	CLI string
	// DefaultPorts makes the server use 7233 (gRPC) and 8233 (UI) when they
	// are free, so the temporal CLI and the UI work without flags. Optional,
	// defaults to false: every port is a free one.
	DefaultPorts bool
	// Headless starts the server without the web UI. Optional, defaults to false.
	Headless bool
	// UICodecEndpoint is the remote codec the web UI decodes payloads with
	// (`--ui-codec-endpoint`, e.g. `causet codec-server`'s URL). Optional.
	UICodecEndpoint string
	// TempDirPrefix names the temp dir (os.MkdirTemp pattern prefix).
	// Optional, defaults to "causet-temporal-".
	TempDirPrefix string
	// DynamicConfig sets server limits (`--dynamic-config-value KEY=VALUE`,
	// VALUE in YAML), e.g. "limit.blobSize.error": "16384" to try limits at
	// a small scale. Optional.
	DynamicConfig map[string]string
}

// Temporal is a `temporal server start-dev` process (in-memory) with the
// [SearchAttributes] registered. Halt and Resume take it down and bring it
// back on the same ports (with empty state: the server is in memory); Stop
// ends it for good. Its methods are safe for concurrent use.
type Temporal struct {
	// HostPort is the frontend gRPC address (127.0.0.1:port).
	HostPort string
	// Namespace is "default".
	Namespace string
	// UIURL is the web UI's base URL (empty when headless).
	UIURL string
	// MetricsURL is the server's own Prometheus endpoint (its /metrics).
	MetricsURL string
	// CLI is the temporal CLI binary the server runs from.
	CLI string
	// Dir is the temp dir holding the server log; Stop removes it.
	Dir string
	// PID is the server's process ID (also its process group ID). Resume
	// changes it: do not read it concurrently with Resume.
	PID int

	pgidFile, logFile string
	argv              []string

	mu           sync.Mutex // serialises launch, Halt, Resume and Stop
	cmd          *exec.Cmd  // nil while halted
	exited       chan struct{}
	stopWatchdog func()
	stopOnce     sync.Once
}

// StartTemporal starts `temporal server start-dev --ip 127.0.0.1` on free
// ports (see TemporalOptions.DefaultPorts) with the Causet search attributes
// and waits until the frontend is healthy, the default namespace exists and
// the search attributes are registered. On error nothing is left behind.
func StartTemporal(ctx context.Context, opts TemporalOptions) (*Temporal, error) {
	if opts.CLI == "" {
		cli, err := FindTemporalCLI()
		if err != nil {
			return nil, err
		}
		opts.CLI = cli
	}
	if opts.TempDirPrefix == "" {
		opts.TempDirPrefix = "causet-temporal-"
	}
	var lastErr error
	for try := range 3 { // a probed free port can be taken before the server binds it
		ports, err := FreePorts(4)
		if err != nil {
			return nil, err
		}
		if opts.DefaultPorts && try == 0 {
			if PortFree(DefaultTemporalPort) {
				ports[0] = DefaultTemporalPort
			}
			if PortFree(DefaultTemporalUIPort) {
				ports[1] = DefaultTemporalUIPort
			}
		}
		t, err := startTemporal(ctx, opts, ports)
		if err == nil {
			return t, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startTemporal(ctx context.Context, opts TemporalOptions, ports []int) (*Temporal, error) {
	dir, err := os.MkdirTemp("", opts.TempDirPrefix)
	if err != nil {
		return nil, err
	}
	t := &Temporal{
		HostPort:   "127.0.0.1:" + strconv.Itoa(ports[0]),
		Namespace:  "default",
		MetricsURL: "http://127.0.0.1:" + strconv.Itoa(ports[3]) + "/metrics",
		CLI:        opts.CLI,
		Dir:        dir,
		logFile:    filepath.Join(dir, "temporal.log"),
		pgidFile:   filepath.Join(dir, "pgid"),
	}
	t.argv = []string{"server", "start-dev", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--ui-port", strconv.Itoa(ports[1]),
		"--http-port", strconv.Itoa(ports[2]), "--metrics-port", strconv.Itoa(ports[3]),
		"--log-level", "warn"}
	if opts.Headless {
		t.argv = append(t.argv, "--headless")
	} else {
		t.UIURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
		if opts.UICodecEndpoint != "" {
			t.argv = append(t.argv, "--ui-codec-endpoint", opts.UICodecEndpoint)
		}
	}
	for _, sa := range SearchAttributes {
		t.argv = append(t.argv, "--search-attribute", sa+"=Keyword")
	}
	for _, sa := range IntSearchAttributes {
		t.argv = append(t.argv, "--search-attribute", sa+"=Int")
	}
	for _, k := range slices.Sorted(maps.Keys(opts.DynamicConfig)) {
		t.argv = append(t.argv, "--dynamic-config-value", k+"="+opts.DynamicConfig[k])
	}
	// One watchdog for the lifetime of t: it kills the process group of
	// whichever server process is current (its PGID is in pgidFile while it
	// runs) and removes the temp dir.
	q := shellQuote(t.pgidFile)
	t.stopWatchdog = watchdog(fmt.Sprintf("p=$(cat %s 2>/dev/null) && kill -KILL -\"$p\" 2>/dev/null; rm -rf %s", q, shellQuote(dir)))
	t.mu.Lock()
	err = t.launchLocked(ctx)
	t.mu.Unlock()
	if err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// launchLocked starts the server process with t.argv and waits until it is
// healthy; on error no process is left. t.mu is held.
func (t *Temporal) launchLocked(ctx context.Context) error {
	logf, err := os.OpenFile(t.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(t.CLI, t.argv...)
	cmd.Dir = t.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so Halt and Stop can kill everything it spawned;
	// die with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", t.CLI, err)
	}
	pid := cmd.Process.Pid
	_ = os.WriteFile(t.pgidFile, []byte(strconv.Itoa(pid)), 0o644)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = os.Remove(t.pgidFile) // before exited: a Resume may write it again
		close(exited)
	}()
	t.cmd, t.exited, t.PID = cmd, exited, pid

	deadline := time.Now().Add(temporalReadyTimeout)
	for {
		select {
		case <-exited:
			t.cmd = nil
			return fmt.Errorf("temporal dev server exited during start-up (%s):\n%s", t.logFile, tail(t.logFile, 30))
		case <-ctx.Done():
			t.killLocked()
			return ctx.Err()
		default:
		}
		err := t.healthy(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			t.killLocked()
			return fmt.Errorf("temporal dev server on %s not healthy after %v: %v\n%s", t.HostPort, temporalReadyTimeout, err, tail(t.logFile, 30))
		}
		_ = backoff.Sleep(ctx, 200*time.Millisecond) // a cancelled ctx ends the start at the top of the loop
	}
}

func quietTemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// healthy dials the frontend and checks health, the default namespace and
// the search attributes.
func (t *Temporal) healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: t.HostPort, Namespace: t.Namespace, Logger: quietTemporalLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: t.Namespace}); err != nil {
		return err
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: t.Namespace})
	if err != nil {
		return err
	}
	for _, name := range append(slices.Clone(SearchAttributes), IntSearchAttributes...) {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			return fmt.Errorf("search attribute %s not registered yet", name)
		}
	}
	return nil
}

// signalLocked sends sig to the server's process group and waits up to wait
// for the server to exit. t.mu is held.
func (t *Temporal) signalLocked(sig syscall.Signal, wait time.Duration) {
	select {
	case <-t.exited: // gone already; its PID may be reused
		return
	default:
	}
	_ = syscall.Kill(-t.cmd.Process.Pid, sig)
	select {
	case <-t.exited:
	case <-time.After(wait):
	}
}

// killLocked SIGKILLs the server's process group, reaps it and marks the
// server halted. t.mu is held.
func (t *Temporal) killLocked() {
	if t.cmd == nil {
		return
	}
	t.signalLocked(syscall.SIGKILL, 10*time.Second)
	t.cmd = nil
}

// Halt kills the server (SIGKILL to its process group) and waits for it to
// exit, keeping its ports and temp dir so Resume can bring it back. It is a
// no-op when the server is not running.
func (t *Temporal) Halt() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.killLocked()
}

// Resume starts a server stopped by Halt again on the same ports and waits
// until it is healthy (as StartTemporal does). The dev server is in memory:
// everything from before the Halt is gone, except the search attributes,
// which the start flags register again. It is a no-op when the server is
// running.
func (t *Temporal) Resume(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cmd != nil {
		return nil
	}
	return t.launchLocked(ctx)
}

// Stop kills the server's process group (SIGTERM, then SIGKILL after 5s),
// waits for it to exit and removes the temp dir. It is idempotent and safe
// on a halted server.
func (t *Temporal) Stop() {
	t.stopOnce.Do(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.cmd != nil {
			t.signalLocked(syscall.SIGTERM, 5*time.Second)
			// Kill whatever is left in the group (the server may have
			// spawned helpers), then reap.
			t.killLocked()
		}
		t.stopWatchdog()
		_ = os.RemoveAll(t.Dir)
	})
}
