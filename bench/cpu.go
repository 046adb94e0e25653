package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUUse is where the CPU went during a measurement, in cores (CPU seconds
// per second): the whole machine, and the processes of the run. Other work
// on the machine is MachineBusy minus the rest.
type CPUUse struct {
	MachineBusy float64 `json:"machineBusy"`
	Bridge      float64 `json:"bridge"`
	Bench       float64 `json:"bench"` // this process: kfake, producers, peer, worker
	Postgres    float64 `json:"postgres"`
	Temporal    float64 `json:"temporal"`
}

// clkTck is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clkTck = 100.0

// cpuSample is a snapshot of CPU tick counters.
type cpuSample struct {
	at                               time.Time
	busy                             float64
	bridge, self, postgres, temporal float64
}

// procs identifies the processes whose CPU a run accounts for.
type procs struct {
	// temporalPIDs are the Temporal server's processes (each the leader of
	// its process group): the dev server's, or a cluster's services
	// (CAUSET_BENCH_TEMPORAL_PIDFILES); none when unknown.
	temporalPIDs []int
	// temporalPGDir is a cluster's PostgreSQL data directory
	// (CAUSET_BENCH_TEMPORAL_PGDATA): its CPU counts as the server's, as the
	// dev server's in-process SQLite does.
	temporalPGDir string
	// temporalMetrics are its Prometheus endpoints (one per service of a
	// cluster), none when unknown.
	temporalMetrics []string
	pgDir           string // devstack's PostgreSQL dir, "" when not ours
}

func (b *bench) sample(bridgePID int) cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), self: procTicks(os.Getpid())}
	if bridgePID > 0 {
		s.bridge = procTicks(bridgePID)
	}
	for _, pid := range b.procs.temporalPIDs {
		s.temporal += groupTicks(pid)
	}
	if pm := postmasterPID(b.procs.temporalPGDir); pm > 0 {
		s.temporal += childrenTicks(pm)
	}
	if pm := postmasterPID(b.procs.pgDir); pm > 0 {
		s.postgres = childrenTicks(pm)
	}
	return s
}

// use is the CPU used between s and e, in cores.
func (s cpuSample) use(e cpuSample) CPUUse {
	d := e.at.Sub(s.at).Seconds() * clkTck
	if d <= 0 {
		return CPUUse{}
	}
	return CPUUse{
		MachineBusy: (e.busy - s.busy) / d,
		Bridge:      (e.bridge - s.bridge) / d,
		Bench:       (e.self - s.self) / d,
		Postgres:    (e.postgres - s.postgres) / d,
		Temporal:    (e.temporal - s.temporal) / d,
	}
}

// machineBusy is the non-idle ticks of all CPUs from /proc/stat.
func machineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		x, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 {
			continue
		}
		busy += x
	}
	return busy
}

// statFields returns the fields of /proc/PID/stat after the command name
// (field 3, state, is index 0).
func statFields(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procTicks is utime+stime of pid.
func procTicks(pid int) float64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return u + s
}

// allProcs calls fn with every process's pid, ppid, pgid and ticks.
func allProcs(fn func(pid, ppid, pgid int, ticks float64)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(pid)
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		fn(pid, ppid, pgid, u+s)
	}
}

// groupTicks sums the process group pgid (the Temporal dev server runs in
// its own group).
func groupTicks(pgid int) float64 {
	var t float64
	allProcs(func(pid, _, g int, ticks float64) {
		if g == pgid {
			t += ticks
		}
	})
	return t
}

// childrenTicks sums the postmaster and its backends.
func childrenTicks(pm int) float64 {
	var t float64
	allProcs(func(pid, ppid, _ int, ticks float64) {
		if pid == pm || ppid == pm {
			t += ticks
		}
	})
	return t
}

// postmasterPID reads postmaster.pid under dir.
func postmasterPID(dir string) int {
	if dir == "" {
		return 0
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*", "postmaster.pid"))
	if m, _ := filepath.Glob(filepath.Join(dir, "postmaster.pid")); len(m) > 0 {
		matches = append(m, matches...)
	}
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		line, _, _ := strings.Cut(string(data), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			return pid
		}
	}
	return 0
}
