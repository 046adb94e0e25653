package devstack

import (
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
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// SearchAttributes are the custom Keyword search attributes the dev server is
// started with (DESIGN §6; the canonical names live in package workflows).
var SearchAttributes = []string{
	"CausetProjection",
	"CausetEventType",
	"CausetEntityId",
	"CausetForkId",
	"CausetRetryState",
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
}

// Temporal is a `temporal server start-dev` process (in-memory) with the
// [SearchAttributes] registered. Stop it with Stop.
type Temporal struct {
	// HostPort is the frontend gRPC address (127.0.0.1:port).
	HostPort string
	// Namespace is "default".
	Namespace string
	// UIURL is the web UI's base URL (empty when headless).
	UIURL string
	// CLI is the temporal CLI binary the server runs from.
	CLI string
	// Dir is the temp dir holding the server log; Stop removes it.
	Dir string
	// PID is the server's process ID (also its process group ID).
	PID int

	logFile      string
	cmd          *exec.Cmd
	exited       chan struct{}
	stopWatchdog func()
	stopOnce     sync.Once
}

// StartTemporal starts `temporal server start-dev --ip 127.0.0.1` on free
// ports (see TemporalOptions.DefaultPorts) with the five search attributes
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
	var lastErr error
	for try := range 3 { // a probed free port can be taken before the server binds it
		ports, err := freePorts(4)
		if err != nil {
			return nil, err
		}
		if opts.DefaultPorts && try == 0 {
			if portFree(DefaultTemporalPort) {
				ports[0] = DefaultTemporalPort
			}
			if portFree(DefaultTemporalUIPort) {
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
	dir, err := os.MkdirTemp("", "causet-dev-temporal-")
	if err != nil {
		return nil, err
	}
	t := &Temporal{
		HostPort:     "127.0.0.1:" + strconv.Itoa(ports[0]),
		Namespace:    "default",
		CLI:          opts.CLI,
		Dir:          dir,
		logFile:      filepath.Join(dir, "temporal.log"),
		stopWatchdog: func() {},
	}
	args := []string{"server", "start-dev", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--ui-port", strconv.Itoa(ports[1]),
		"--http-port", strconv.Itoa(ports[2]), "--metrics-port", strconv.Itoa(ports[3]),
		"--log-level", "warn"}
	if opts.Headless {
		args = append(args, "--headless")
	} else {
		t.UIURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	}
	for _, sa := range SearchAttributes {
		args = append(args, "--search-attribute", sa+"=Keyword")
	}
	logf, err := os.OpenFile(t.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(opts.CLI, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so Stop can kill everything it spawned; die with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", opts.CLI, err)
	}
	t.cmd, t.PID = cmd, cmd.Process.Pid
	t.stopWatchdog = watchdog(fmt.Sprintf("kill -KILL -%d 2>/dev/null; rm -rf %s", t.PID, shellQuote(dir)))
	t.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(t.exited) }()

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-t.exited:
			msg := tail(t.logFile, 30)
			t.Stop()
			return nil, fmt.Errorf("temporal dev server exited during start-up:\n%s", msg)
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		default:
		}
		err := t.healthy(ctx)
		if err == nil {
			return t, nil
		}
		if time.Now().After(deadline) {
			msg := tail(t.logFile, 30)
			t.Stop()
			return nil, fmt.Errorf("temporal dev server on %s not healthy after 90s: %v\n%s", t.HostPort, err, msg)
		}
		time.Sleep(200 * time.Millisecond)
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
	for _, name := range SearchAttributes {
		if _, ok := resp.GetCustomAttributes()[name]; !ok {
			return fmt.Errorf("search attribute %s not registered yet", name)
		}
	}
	return nil
}

// Stop kills the server's process group (SIGTERM, then SIGKILL after 5s),
// waits for it to exit and removes the temp dir. It is idempotent.
func (t *Temporal) Stop() {
	t.stopOnce.Do(func() {
		if t.cmd != nil {
			_ = syscall.Kill(-t.PID, syscall.SIGTERM)
			select {
			case <-t.exited:
			case <-time.After(5 * time.Second):
			}
			// Kill whatever is left in the group (the server may have
			// spawned helpers), then reap.
			_ = syscall.Kill(-t.PID, syscall.SIGKILL)
			select {
			case <-t.exited:
			case <-time.After(10 * time.Second):
			}
		}
		t.stopWatchdog()
		_ = os.RemoveAll(t.Dir)
	})
}
