package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bridgeProc is a `causet bridge` child process: the real bridge, with a
// process of its own so its RSS is the bridge's alone (the bench process
// also holds kfake's records, the worker and the producers).
type bridgeProc struct {
	cmd     *exec.Cmd
	metrics string
	done    chan error
	log     *os.File
}

// startBridge runs the bridge command with env added to the environment
// and waits until its metrics endpoint answers.
func (b *bench) startBridge(ctx context.Context, phase string, env map[string]string) (*bridgeProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	profile := ""
	if b.opts.CPUProfile != "" {
		profile = b.opts.CPUProfile + ".bridge-" + phase
	}
	cmd := b.opts.BridgeCommand(profile)
	base := map[string]string{
		"DATABASE_URL":               b.dbURL,
		"KAFKA_BROKERS":              strings.Join(b.brokers, ","),
		"CAUSET_METRICS_ADDR":        fmt.Sprintf("127.0.0.1:%d", port),
		"CAUSET_DLQ_TOPIC":           b.dlqTopic,
		"CAUSET_BRIDGE_MODE":         "inline",
		"CAUSET_BRIDGE_MAX_INFLIGHT": strconv.Itoa(b.sizes.MaxInflight),
	}
	if b.temporalAddr != "" {
		base["TEMPORAL_ADDRESS"] = b.temporalAddr
		base["TEMPORAL_NAMESPACE"] = "default"
	}
	for k, v := range retryEnv(b.short) {
		base[k] = v
	}
	for k, v := range env {
		base[k] = v
	}
	cmd.Env = os.Environ()
	for k, v := range base {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logf, err := os.Create(filepath.Join(b.opts.Out, "bridge-"+phase+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start bridge: %w", err)
	}
	p := &bridgeProc{cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), done: make(chan error, 1), log: logf}
	go func() { p.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := p.scrape(ctx); err == nil {
			return p, nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			logf.Close()
			return nil, fmt.Errorf("bridge (%s) exited before serving metrics: %v: %s (log: %s)", phase, err, lastLine(logf.Name()), logf.Name())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("bridge (%s) did not serve metrics within 60s; see %s", phase, logf.Name())
		}
	}
}

// stop sends SIGTERM (a clean stop commits and writes the CPU profile),
// then SIGKILL after 15s.
func (p *bridgeProc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
}

// exited reports a bridge that stopped on its own.
func (p *bridgeProc) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		return fmt.Errorf("bridge exited during the run: %v: %s (log: %s)", err, lastLine(p.log.Name()), p.log.Name())
	default:
		return nil
	}
}

// counters are the bridge's metrics the bench reads, each summed over labels.
type counters struct {
	consumed, applied, duplicate, failed, handedOff float64
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

func (p *bridgeProc) scrape(ctx context.Context) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return counters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseCounters(resp.Body)
}

// parseCounters reads the Prometheus text format.
func parseCounters(r io.Reader) (counters, error) {
	var c counters
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, "causet_bridge_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		labels := ""
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name, labels = name[:j], name[j:]
		}
		switch name {
		case "causet_bridge_records_consumed_total":
			c.consumed += v
		case "causet_bridge_applied_total":
			if strings.Contains(labels, `result="duplicate"`) {
				c.duplicate += v
			} else {
				c.applied += v
			}
		case "causet_bridge_inline_failures_total":
			c.failed += v
		case "causet_bridge_handed_off_total":
			c.handedOff += v
		}
	}
	return c, sc.Err()
}

// rss returns the process's current and peak resident set in MB (VmRSS and
// VmHWM from /proc/PID/status).
func rss(pid int) (cur, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	if cur == 0 {
		return 0, 0, errors.New("no VmRSS in /proc status")
	}
	return cur, peak, sc.Err()
}

// waitBridge polls the bridge every 20 ms: start is the first poll that
// sees a consumed record, end the first at which done holds. It returns
// the elapsed time and the last counters.
func (b *bench) waitBridge(ctx context.Context, p *bridgeProc, timeout time.Duration, done func(counters) (bool, error)) (time.Duration, CPUUse, error) {
	var start time.Time
	var s0 cpuSample
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last counters
	for {
		if err := p.exited(); err != nil {
			return 0, CPUUse{}, err
		}
		c, err := p.scrape(ctx)
		now := time.Now()
		if err == nil {
			last = c
			if start.IsZero() && c.consumed > 0 {
				start = now
				s0 = b.sample(p.cmd.Process.Pid)
			}
			if !start.IsZero() {
				ok, err := done(c)
				if err != nil {
					return 0, CPUUse{}, err
				}
				if ok {
					return now.Sub(start), s0.use(b.sample(p.cmd.Process.Pid)), nil
				}
			}
		}
		if now.After(deadline) {
			return 0, CPUUse{}, fmt.Errorf("timed out after %s (consumed %.0f, applied %.0f, failed %.0f, handed off %.0f)",
				timeout, last.consumed, last.applied, last.failed, last.handedOff)
		}
		select {
		case <-ctx.Done():
			return 0, CPUUse{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// lastLine is the last non-empty line of a file (a child's last words).
func lastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1]
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
