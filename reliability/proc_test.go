package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// proc is a causet subprocess.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	metrics string // host:port of its /metrics
	done    chan struct{}
	err     error
}

var procSeq struct {
	sync.Mutex
	n int
}

// start runs `causet <args...>` with the stack's env (+extra); its stderr goes
// to a log file in the stack's dir. It is killed when the test ends.
func (s *stack) start(name string, extra map[string]string, args ...string) *proc {
	s.t.Helper()
	return s.startOn(nil, name, extra, args...)
}

// startOn is start on a test host of its own (nil: this namespace); its
// metrics are served on the host's address.
func (s *stack) startOn(h *testenv.Host, name string, extra map[string]string, args ...string) *proc {
	s.t.Helper()
	return s.startBin(s.bin, h, name, extra, args...)
}

// startBin is startOn with another causet binary (a previous release's).
func (s *stack) startBin(bin string, h *testenv.Host, name string, extra map[string]string, args ...string) *proc {
	s.t.Helper()
	procSeq.Lock()
	procSeq.n++
	n := procSeq.n
	procSeq.Unlock()
	p := &proc{name: name, log: filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, n)), done: make(chan struct{}),
		metrics: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(s.t))}
	if h != nil {
		p.metrics = h.IP + ":" + strconv.Itoa(testenv.FreePort(s.t))
	}
	f, err := os.Create(p.log)
	require.NoError(s.t, err)
	withMetrics := map[string]string{"CAUSET_METRICS_ADDR": p.metrics}
	for k, v := range extra {
		withMetrics[k] = v
	}
	if h == nil {
		p.cmd = exec.Command(bin, args...)
	} else {
		p.cmd = h.Command(bin, args...)
	}
	p.cmd.Env = s.procEnv(withMetrics)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(s.t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	s.t.Cleanup(func() { p.kill() })
	return p
}

func (s *stack) bridge(extra map[string]string) *proc { return s.start("bridge", extra, "bridge") }
func (s *stack) worker(extra map[string]string) *proc { return s.start("worker", extra, "worker") }

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *proc) kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// stop sends SIGTERM, as Kubernetes does to a pod it replaces, and waits
// up to 30 s for the process to finish what it holds and exit; then kill.
func (p *proc) stop() {
	if !p.signal(syscall.SIGTERM, 30*time.Second) {
		p.kill()
	}
}

// signal sends sig and waits up to within for the process to exit; false
// when it is still running.
func (p *proc) signal(sig syscall.Signal, within time.Duration) bool {
	if p.exited() {
		return true
	}
	_ = syscall.Kill(p.pid(), sig)
	select {
	case <-p.done:
		return true
	case <-time.After(within):
		return false
	}
}

// memKB reads VmRSS and VmHWM (peak RSS) in kB from /proc/<pid>/status.
func (p *proc) memKB() (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return -1, -1
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// logTail returns the last n lines of the process log.
func (p *proc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logCount counts log lines containing s.
func (p *proc) logCount(s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

// logEvents returns the process' JSON log lines whose "event" is ev.
func (p *proc) logEvents(ev string) []map[string]any {
	b, _ := os.ReadFile(p.log)
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"`+ev+`"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["event"] == ev {
			out = append(out, m)
		}
	}
	return out
}

// metric sums the samples of a Prometheus metric on the process' /metrics
// (-1 when it cannot be read).
func (p *proc) metric(name string) float64 {
	return p.sumMetrics(func(line string) bool {
		return strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{")
	})
}

// metricWhere sums the samples of a metric whose labels contain match (e.g.
// `result="released"`); -1 when /metrics cannot be read.
func (p *proc) metricWhere(name, match string) float64 {
	return p.sumMetrics(func(line string) bool {
		return strings.HasPrefix(line, name+"{") && strings.Contains(line, match)
	})
}

// sumMetrics sums the samples on the lines of the process' /metrics that
// keep selects (-1 when it cannot be read).
func (p *proc) sumMetrics(keep func(line string) bool) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !keep(line) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// causetOutput runs `causet <args...>` with the stack's environment to its
// end and returns what it printed on stdout.
func (s *stack) causetOutput(args ...string) (string, error) {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.procEnv(nil)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("causet %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}
