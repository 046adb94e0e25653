package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

// The soak (`make soak`, RELIABILITY.md "Soak"): the system as a user
// runs it — two bridges and two workers on one group and task queue, a
// paced stream written straight to Kafka with 2 % of events failing on keys
// that also carry events that succeed, and the write path (runtime, relay,
// HTTP clients: soak_writepath_test.go) feeding two more projections —
// while a nemesis, drawn from a seed, injects faults that overlap: kill -9
// and SIGSTOP/SIGCONT of any process (a stop can
// outlast the group's 15 s session: a zombie bridge that wakes up fenced),
// PostgreSQL, Kafka and Temporal stopped and started, and, as each process runs
// on a test host of its own (testenv.Network), its link to PostgreSQL,
// Kafka or Temporal cut without a word (both ways, or one way: requests
// that vanish, or replies that do — a peer that accepts and never
// answers) for up to 45 s, or made slow and lossy. When the faults stop
// and the system drains, the checker of the scenarios (verify) proves:
// every succeeding event applied once, every failing one dead-lettered
// once with one retry workflow, no entity applied out of order, nothing
// left parked or blocked; each process's RSS, goroutines (a worker's less
// one per cached workflow) and open files are sampled, reported, and must
// not triple after warm-up. Twice the projection's table is broken as a
// bad migration breaks it, opening an incident (held under odd seeds' policy
// hold), and two rollouts are started: every incident and rollout run must
// end (soak_incidents_test.go). Once settled, the operator replays the
// breaks' dead letters (soak_replays_test.go).
//
// CAUSET_SOAK=1 runs it; CAUSET_SOAK_DURATION (default 8m) is how long the
// faults go on, CAUSET_SOAK_SEED replays a schedule (it is printed), and
// the report (markdown and an SVG timeline) is written to
// CAUSET_SOAK_REPORT (default: the test's log directory).
func TestSoak(t *testing.T) {
	if os.Getenv("CAUSET_SOAK") == "" {
		t.Skip("the soak runs with CAUSET_SOAK=1 (make soak)")
	}
	testenv.NeedStoppablePostgres(t)
	duration := 8 * time.Minute
	if v := os.Getenv("CAUSET_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "CAUSET_SOAK_DURATION")
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CAUSET_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "CAUSET_SOAK_SEED")
		seed = n
	}
	t.Logf("soak seed %d, faults for %s (replay the schedule: make soak SEED=%d DURATION=%s)", seed, duration, seed, duration)
	r := newResult(t, "soak")
	r.fig("seed", seed)
	r.fig("duration_s", duration.Seconds())

	dev := startTemporalDev(t)
	nw := testenv.NewNetwork(t)
	kafka := nw.KafkaCluster()
	w := newWritePath(t, stackOptions{partitions: 6, temporal: dev.hostPort, brokers: kafka.ListenAddrs()})
	w.direct = directEvent
	ns := onHosts(t, w.stack, nw)
	s := ns.stack
	for k, v := range shortSchedule {
		s.env[k] = v
	}
	incidents, hold := soakIncidents(seed)
	for k, v := range incidents {
		s.env[k] = v
	}
	r.fig("incident_policy", map[bool]string{true: "hold", false: "dead-letter"}[hold])
	so := &soak{s: s, ns: ns, dev: dev, rng: rand.New(rand.NewPCG(seed, 0x736f616b)), start: time.Now(), down: map[string]bool{}}
	so.stopKafka, so.startKafka = kafkaSwitch(kafka)
	for _, name := range []string{"bridge-1", "bridge-2", "worker-1", "worker-2"} {
		role, _, _ := strings.Cut(name, "-")
		h := nw.Host(name)
		so.slots = append(so.slots, &soakSlot{name: name, host: h, run: func() *proc { return s.startOn(h, role, nil, role) }})
	}
	so.writePathSlots(w, nw)
	// Every process is up (past its start-up checks) before the first
	// fault: a start that a fault fails is the supervisor's to repeat, and
	// only a restart has one.
	for _, sl := range so.slots {
		sl.p = sl.run()
		sl.born = time.Now()
	}
	for _, sl := range so.slots {
		require.Eventually(t, func() bool { return sl.p.exited() || httpStatus("http://"+sl.p.metrics+"/healthz") > 0 },
			2*time.Minute, 200*time.Millisecond, "%s up", sl.name)
		require.False(t, sl.p.exited(), "%s exited at start-up:\n%s", sl.name, sl.p.logTail(20))
	}

	const rate = 40 // events per second
	n := int(duration.Seconds()) * rate
	var events eventLog
	produced := s.producePaced(n, duration, twoPercent, &events)
	clients := so.submitIntents(w, seed, duration)
	stopSampling := so.sample()
	rollouts := so.rollOut(seed, duration)
	fixed := so.breakTable(seed, duration, hold)
	stopResolving := so.resolveStrayHolds()
	defer stopResolving()
	so.nemesis(duration)
	<-produced
	so.wg.Wait()
	fixed()
	ids := rollouts()
	clients.answerAll(t, so, 5*time.Minute)
	so.note("faults over: every process running, PostgreSQL, Kafka and Temporal up")
	for _, sl := range so.slots {
		// A killed process was started again by its fault: one that is gone
		// now exited by itself.
		require.False(t, sl.p.exited(), "%s exited by itself:\n%s", sl.name, sl.p.logTail(30))
	}

	drain := time.Now()
	ok := s.waitCommittedToEnd(10 * time.Minute)
	if !ok {
		so.writeReport(t, nil)
		require.Fail(t, "offsets not committed to the end", "%s\ntimeline:\n%s", s.progress(), strings.Join(so.timeline(), "\n"))
	}
	evs := events.all()
	if !s.waitSettled(r, evs, 10*time.Minute) {
		so.writeReport(t, nil)
		require.Fail(t, "not settled: something still parked, blocked, retrying or held", "%s; %d parked, %d blocked; incidents: %s\ntimeline:\n%s",
			s.progress(), s.parkedCount(), s.blockedKeys(), so.incidentStates(), strings.Join(so.timeline(), "\n"))
	}
	r.fig("drain_s", time.Since(drain).Round(time.Second).Seconds())
	stopSampling()
	for _, sl := range so.slots {
		require.False(t, sl.p.exited(), "%s exited by itself:\n%s", sl.name, sl.p.logTail(30))
	}
	so.rolloutsEnded(t, r, ids)
	so.incidentsEnded(t, r, hold)
	so.replayBreakDeadLetters(t, r, evs)
	v := s.verify(evs, true, true)
	r.fig("faults", len(so.faults))
	for kind, c := range so.counts() {
		r.fig("faults_"+kind, c)
	}
	so.writeReport(t, &v)
	t.Logf("timeline:\n%s", strings.Join(so.timeline(), "\n"))
	r.verdict(v, true, true) // also: one dedupe ledger row per applied event, no more
	so.writePathHolds(t, r, clients)
	so.checkGrowth(t, r)
}

// rollOut starts, at two times of the faults drawn from the seed (a
// schedule of its own, so the nemesis's is the seed's alone), a rollout of
// the deployed projection allowing no failing event, as an operator tries
// one before the fix: the same document, so the second is a rerun of the
// first's ID once it has stopped. Every failing event still fails, so each
// stops at its check (one that finds none failing yet deploys nothing new,
// replays nothing and is done); under the faults each must end. A start
// refused while PostgreSQL or Temporal is down is tried again, as an
// operator would. It returns a function that waits for the starts and
// gives the rollouts' IDs.
func (so *soak) rollOut(seed uint64, d time.Duration) (started func() []string) {
	rng := rand.New(rand.NewPCG(seed, 0x726f6c6c))
	file := filepath.Join(so.s.dir, "rel_effects.deployed.yaml")
	var ids []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		if os.WriteFile(file, []byte(relIR), 0o644) != nil {
			return
		}
		at := []time.Duration{time.Duration(rng.Int64N(int64(d / 2))), d/2 + time.Duration(rng.Int64N(int64(d/3)))}
		for _, when := range at {
			time.Sleep(time.Until(so.start.Add(when)))
			for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(5 * time.Second) {
				out, err := so.s.causetOutput("projections", "rollout", file, "--max-failing", "0", "--no-wait", "--reason", "soak: a rerun before the fix")
				if err != nil {
					so.note("rollout refused, tried again in 5 s: %s", strings.TrimSpace(oneLine(err.Error())))
					continue
				}
				if m := rolloutIDLine.FindStringSubmatch(out); m != nil {
					so.note("rollout %s started", m[1])
					ids = append(ids, m[1])
				}
				break
			}
		}
	}()
	return func() []string { <-done; return ids }
}

var rolloutIDLine = regexp.MustCompile(`rollout (projection-rollout:\S+) \(run`)

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// rolloutsEnded requires every rollout the soak started to have ended
// (stopped at its check, as the dead letters still fail) and none to be
// left running.
func (so *soak) rolloutsEnded(t *testing.T, r *result, ids []string) {
	require.Len(t, ids, 2, "two rollouts started:\n%s", strings.Join(so.timeline(), "\n"))
	c := so.s.temporal.Client
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		ctx, cancel := context.WithTimeout(so.s.ctx, 5*time.Minute)
		err := c.GetWorkflow(ctx, id, "").Get(ctx, nil)
		cancel()
		var appErr *temporal.ApplicationError
		if err == nil {
			so.note("rollout %s done", id)
			r.fig("rollouts_done", 1)
			continue
		}
		require.True(t, errors.As(err, &appErr) && appErr.Type() == contract.RolloutStoppedType, "rollout %s did not end: %v", id, err)
		var p contract.RolloutProgress
		require.NoError(t, appErr.Details(&p))
		require.Zero(t, p.Replayed, "rollout %s replayed dead letters that still fail: %+v", id, p)
		so.note("rollout %s stopped: %s", id, oneLine(p.Reason))
	}
	require.Eventually(t, func() bool {
		return !slices.ContainsFunc(so.s.workflowsOnQueue(contract.RolloutWorkflowName), func(e testenv.WorkflowExecution) bool {
			return e.Status == enums.WORKFLOW_EXECUTION_STATUS_RUNNING
		})
	}, 30*time.Second, time.Second, "a rollout run is still open")
	r.fig("rollouts", len(ids))
}

// soak is one soak run: its processes, nemesis and what it saw.
type soak struct {
	s     *stack
	ns    *netStack
	dev   *temporalDev
	rng   *rand.Rand
	start time.Time
	slots []*soakSlot
	wg    sync.WaitGroup

	mu      sync.Mutex
	faults  []soakFault
	notes   []string
	applied []soakSample
	// lag samples the group's lag: records on the events topic past its
	// committed offsets (none while Kafka does not answer).
	lag  []soakSample
	down map[string]bool // the kinds of outage under way
	// stopKafka and startKafka stop and start the Kafka broker (kafkaSwitch).
	stopKafka, startKafka func()
}

// kafkaSwitch returns what stops and starts the kfake broker: stopped,
// it closes the connection of every request it receives, as a broker
// that is down refuses them, and keeps its topics, offsets and groups for
// when it is started again, as a restarted broker keeps its log.
func kafkaSwitch(c *kfake.Cluster) (stop, start func()) {
	var down atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !down.Load() {
			return nil, nil, false
		}
		return nil, errors.New("soak: Kafka stopped"), true
	})
	return func() { down.Store(true) }, func() { down.Store(false) }
}

// soakSlot is a process the nemesis may kill or stop; mu is held while a
// fault has it.
type soakSlot struct {
	name string
	host *testenv.Host
	run  func() *proc
	mu   sync.Mutex
	// link is held while the host's link is slowed.
	link sync.Mutex
	p    *proc
	born time.Time
	// mem, goroutines and fds are the current process's samples of its RSS
	// (kB), goroutines and open files, with the time each was taken.
	mem, goroutines, fds []soakSample
}

// soakFault is one injected fault: its kind, target and span.
type soakFault struct {
	kind, target string
	from, to     time.Duration
}

type soakSample struct {
	at time.Duration
	v  int64
}

func (so *soak) since() time.Duration { return time.Since(so.start).Round(100 * time.Millisecond) }

func (so *soak) note(format string, args ...any) {
	so.mu.Lock()
	defer so.mu.Unlock()
	so.notes = append(so.notes, fmt.Sprintf("%8s  ", so.since())+fmt.Sprintf(format, args...))
}

func (so *soak) timeline() []string {
	so.mu.Lock()
	defer so.mu.Unlock()
	return append([]string(nil), so.notes...)
}

func (so *soak) record(f soakFault) {
	so.mu.Lock()
	so.faults = append(so.faults, f)
	so.mu.Unlock()
}

func (so *soak) counts() map[string]int {
	so.mu.Lock()
	defer so.mu.Unlock()
	out := map[string]int{}
	for _, f := range so.faults {
		out[f.kind]++
	}
	return out
}

// nemesis injects faults for d: a new one every 5-25 s (drawn from the
// seed), each on its own, so that they overlap. It returns once the last
// one has begun; so.wg waits for them to end.
func (so *soak) nemesis(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		gap := time.Duration(5+so.rng.IntN(21)) * time.Second
		hold := time.Duration(3+so.rng.IntN(28)) * time.Second // a stop or outage: 3-30 s
		kind := so.rng.IntN(9)
		slot := so.slots[so.rng.IntN(len(so.slots))]
		switch kind {
		case 0, 1:
			so.kill(slot, time.Duration(so.rng.IntN(3000))*time.Millisecond)
		case 2, 3:
			so.pause(slot, hold)
		case 4:
			so.outage("postgres", "PostgreSQL", min(hold, 20*time.Second),
				func() { testenv.StopPostgres(so.s.t) }, func() { testenv.StartPostgres(so.s.t) })
		case 5:
			so.outage("temporal", "Temporal", min(hold, 20*time.Second), so.dev.stop, so.dev.start)
		case 6:
			// Some outlast the group's 15 s session, the bridge's 10 s
			// PostgreSQL deadlines and a dead letter's 30 s publish.
			so.cut(slot, so.rng.IntN(3), testenv.Direction(so.rng.IntN(3)), time.Duration(3+so.rng.IntN(43))*time.Second)
		case 7:
			so.slowLink(slot, hold)
		case 8:
			so.outage("kafka", "Kafka", min(hold, 20*time.Second), so.stopKafka, so.startKafka)
		}
		time.Sleep(min(gap, time.Until(end)))
	}
}

// kill kill -9s the slot's process and starts a new one after restartIn.
func (so *soak) kill(sl *soakSlot, restartIn time.Duration) {
	if !sl.mu.TryLock() {
		return // another fault has it
	}
	so.wg.Add(1)
	go func() {
		defer so.wg.Done()
		defer sl.mu.Unlock()
		from := so.since()
		sl.p.kill()
		so.note("kill -9 %s (restarted in %s)", sl.name, restartIn)
		time.Sleep(restartIn)
		so.supervise(sl)
		so.record(soakFault{"kill", sl.name, from, so.since()})
	}()
}

// supervise starts the slot's process as a supervisor (Kubernetes) would: a
// process refuses to start while PostgreSQL or Temporal is down or out of
// reach, and is started again, with a pause, until it is up (it serves
// /healthz once its start-up checks pass), for at most 3 minutes. A start
// across a silent link fails only when its connect deadline does.
func (so *soak) supervise(sl *soakSlot) {
	for end := time.Now().Add(3 * time.Minute); ; {
		sl.p, sl.born, sl.mem, sl.goroutines, sl.fds = sl.run(), time.Now(), nil, nil, nil
		for !sl.p.exited() && httpStatus("http://"+sl.p.metrics+"/healthz") <= 0 && time.Now().Before(end) {
			time.Sleep(500 * time.Millisecond)
		}
		if !sl.p.exited() || time.Now().After(end) {
			return
		}
		so.note("%s exited at start-up, started again: %s", sl.name, strings.TrimSpace(sl.p.logTail(1)))
		time.Sleep(2 * time.Second)
	}
}

// cut drops, without a word to either end, the packets between the slot's
// host and one service (0 PostgreSQL, 1 Kafka, 2 Temporal) in dir for
// hold: a blackhole, or a one-way partition (requests vanish, or arrive
// and their replies vanish: a peer that accepts and never answers). Cuts
// overlap each other and every other fault.
func (so *soak) cut(sl *soakSlot, service int, dir testenv.Direction, hold time.Duration) {
	name := [...]string{"PostgreSQL", "Kafka", "Temporal"}[service]
	port := [...]int{so.ns.pgPort, so.ns.kafkaPort, so.ns.temporalPort}[service]
	how := [...]string{"both ways", "what it sends", "what it receives"}[dir]
	so.wg.Add(1)
	go func() {
		defer so.wg.Done()
		from := so.since()
		heal := sl.host.Cut(port, dir)
		so.note("link %s ↔ %s cut (%s) for %s", sl.name, name, how, hold)
		time.Sleep(hold)
		heal()
		so.note("link %s ↔ %s healed", sl.name, name)
		so.record(soakFault{"link", sl.name + " link", from, so.since()})
	}()
}

// slowLink makes the slot's link slow (1 Mbit/s each way, up to 200 ms
// queued) and lossy (5 % of packets each way) for hold, one at a time per
// host (the rate limit is the link's own queue).
func (so *soak) slowLink(sl *soakSlot, hold time.Duration) {
	if !sl.link.TryLock() {
		return
	}
	so.wg.Add(1)
	go func() {
		defer so.wg.Done()
		defer sl.link.Unlock()
		from := so.since()
		slow, lossy := sl.host.Slow("1mbit", "200ms"), sl.host.Lossy(5)
		so.note("link %s slow and lossy for %s", sl.name, hold)
		time.Sleep(hold)
		slow()
		lossy()
		so.note("link %s healed", sl.name)
		so.record(soakFault{"slow", sl.name + " link", from, so.since()})
	}()
}

// pause stops the slot's process (SIGSTOP) for hold, then lets it go on.
func (so *soak) pause(sl *soakSlot, hold time.Duration) {
	if !sl.mu.TryLock() {
		return
	}
	so.wg.Add(1)
	go func() {
		defer so.wg.Done()
		defer sl.mu.Unlock()
		from := so.since()
		if sl.p.exited() {
			return
		}
		_ = syscall.Kill(sl.p.pid(), syscall.SIGSTOP)
		so.note("SIGSTOP %s for %s", sl.name, hold)
		time.Sleep(hold)
		_ = syscall.Kill(sl.p.pid(), syscall.SIGCONT)
		so.note("SIGCONT %s", sl.name)
		so.record(soakFault{"pause", sl.name, from, so.since()})
	}()
}

// outage stops a server (kind: "postgres", "temporal" or "kafka") for hold, one
// outage of each kind at a time.
func (so *soak) outage(kind, name string, hold time.Duration, stop, start func()) {
	so.mu.Lock()
	busy := so.down[kind]
	so.down[kind] = true
	so.mu.Unlock()
	if busy {
		return
	}
	so.wg.Add(1)
	go func() {
		defer so.wg.Done()
		from := so.since()
		stop()
		so.note("%s stopped for %s", name, hold)
		time.Sleep(hold)
		start()
		so.note("%s started", name)
		so.record(soakFault{kind, kind, from, so.since()})
		so.mu.Lock()
		so.down[kind] = false
		so.mu.Unlock()
	}()
}

// sample records, every 5 s until stopped, how many events are applied and
// each process's RSS, goroutines and open files.
func (so *soak) sample() (stop func()) {
	return every(5*time.Second, func() {
		at := so.since()
		if n := so.s.tryCount(`SELECT count(*) FROM rel_effects`); n >= 0 {
			so.mu.Lock()
			so.applied = append(so.applied, soakSample{at, int64(n)})
			so.mu.Unlock()
		}
		if lag, ok := so.s.groupLag(); ok {
			so.mu.Lock()
			so.lag = append(so.lag, soakSample{at, lag})
			so.mu.Unlock()
		}
		for _, sl := range so.slots {
			if !sl.mu.TryLock() {
				continue // a fault has it
			}
			if rss, _ := sl.p.memKB(); rss > 0 {
				sl.mem = append(sl.mem, soakSample{at, rss})
			}
			// From the process's own /metrics (the Go and process
			// collectors). A worker keeps a goroutine per workflow in its
			// cache (the dead letters open for their replay window grow
			// it by design, up to the cache's size): those are not counted.
			if n := sl.p.metric("go_goroutines"); n > 0 {
				if cached := sl.p.metric("temporal_sticky_cache_size"); cached > 0 {
					n -= cached
				}
				// The two gauges are read apart: a cache that grew
				// between them can make the difference negative, a
				// sample that means nothing.
				if n >= 0 {
					sl.goroutines = append(sl.goroutines, soakSample{at, int64(n)})
				}
			}
			if n := sl.p.metric("process_open_fds"); n > 0 {
				sl.fds = append(sl.fds, soakSample{at, int64(n)})
			}
			sl.mu.Unlock()
		}
	})
}

// every runs fn every interval, in a goroutine, until stop returns.
func every(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// checkGrowth reports each process's RSS, goroutines and open files after
// warm-up (its first minute) and at the end, and fails on a process whose
// figure tripled since (plus a margin for small counts): a leak.
func (so *soak) checkGrowth(t *testing.T, r *result) {
	for _, sl := range so.slots {
		for _, series := range []struct {
			name    string
			samples []soakSample
			margin  int64
		}{{"rss_kb", sl.mem, 0}, {"goroutines", sl.goroutines, 100}, {"open_fds", sl.fds, 50}} {
			var warm, last int64
			for _, m := range series.samples {
				if m.at-series.samples[0].at >= time.Minute && warm == 0 {
					warm = m.v
				}
				last = m.v
			}
			r.fig(sl.name+"_"+series.name, last)
			if warm > 0 {
				r.fig(sl.name+"_"+series.name+"_after_warmup", warm)
				require.Less(t, last, 3*warm+series.margin, "%s: %s grew from %d after warm-up to %d", sl.name, series.name, warm, last)
			}
		}
	}
}

// writeReport writes the run's report (markdown) and its timeline (SVG:
// events applied over time, faults as bars) to CAUSET_SOAK_REPORT or the
// test's log directory.
func (so *soak) writeReport(t *testing.T, v *verdict) {
	dir := os.Getenv("CAUSET_SOAK_REPORT")
	if dir == "" {
		dir = so.s.dir
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	so.mu.Lock()
	faults := append([]soakFault(nil), so.faults...)
	applied := append([]soakSample(nil), so.applied...)
	lag := append([]soakSample(nil), so.lag...)
	so.mu.Unlock()

	var b strings.Builder
	fmt.Fprintf(&b, "# Soak report\n\n%s, %d faults over %s.\n\n", time.Now().UTC().Format(time.RFC3339), len(faults), so.since())
	if v != nil {
		fmt.Fprintf(&b, "| produced | succeeding | failing | lost | applied twice | DLQ records | DLQ duplicates | retry workflows | duplicate workflows | order inversions |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n\n", v.produced, v.succeeded, v.failing, v.lost, v.doubleApplied,
			v.dlq, v.dlqDup, v.workflows, v.dupWorkflows, v.inversions)
		if v.brokenDeadLettered+v.replayApplied+v.replayRefused > 0 {
			fmt.Fprintf(&b, "Left by the table's breaks and the operator's replay: %d dead-lettered and not applied (%d of them refused by the replay), %d applied by the replay, %d neither applied nor refused.\n\n",
				v.brokenDeadLettered, v.replayRefused, v.replayApplied, v.replayUnresolved)
		}
	} else {
		b.WriteString("The run did not drain: see the timeline.\n\n")
	}
	b.WriteString("![timeline](soak-timeline.svg)\n\n## Timeline\n\n```\n")
	b.WriteString(strings.Join(so.timeline(), "\n"))
	b.WriteString("\n```\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "soak-report.md"), []byte(b.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "soak-timeline.svg"), []byte(soakSVG(applied, lag, faults, so.since())), 0o644))
	t.Logf("soak report: %s", filepath.Join(dir, "soak-report.md"))
}

// soakSVG draws the events applied per second and the group's lag over
// time, each scaled to its own peak, with a bar per fault.
func soakSVG(applied, lag []soakSample, faults []soakFault, span time.Duration) string {
	const w, top = 900.0, 20.0
	rows := map[string]float64{} // a row of bars per fault target
	for _, f := range faults {
		if _, ok := rows[f.target]; !ok {
			rows[f.target] = float64(len(rows))
		}
	}
	h := 280 + 14*float64(len(rows))                                                               // the chart keeps its height however many rows
	x := func(d time.Duration) float64 { return 110 + (w-130)*d.Seconds()/max(span.Seconds(), 1) } // fault names on the left
	var rates []soakSample
	var peak int64 = 1
	for i := 1; i < len(applied); i++ {
		dt := (applied[i].at - applied[i-1].at).Seconds()
		if dt <= 0 {
			continue
		}
		r := int64(float64(applied[i].v-applied[i-1].v) / dt)
		rates = append(rates, soakSample{applied[i].at, r})
		peak = max(peak, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	var lagPeak int64 = 1
	for _, l := range lag {
		lagPeak = max(lagPeak, l.v)
	}
	fmt.Fprintf(&b, `<text x="110" y="14"><tspan fill="#2ca02c">events applied per second (peak %d)</tspan>, <tspan fill="#e377c2">the group's lag in records (peak %d)</tspan>; faults below</text>`+"\n", peak, lagPeak)
	colors := map[string]string{"kill": "#d62728", "pause": "#ff7f0e", "postgres": "#1f77b4", "temporal": "#9467bd",
		"link": "#7f7f7f", "slow": "#bcbd22", "break": "#8c564b", "kafka": "#17becf"}
	chartBottom := h - 20 - 14*float64(len(rows))
	var pts []string
	for _, r := range rates {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.at), chartBottom-(chartBottom-top)*float64(r.v)/float64(peak)))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#2ca02c" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(pts, " "))
	pts = pts[:0]
	for _, l := range lag {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(l.at), chartBottom-(chartBottom-top)*float64(l.v)/float64(lagPeak)))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#e377c2" stroke-width="1" points="%s"/>`+"\n", strings.Join(pts, " "))
	for target, row := range rows {
		fmt.Fprintf(&b, `<text x="0" y="%.1f">%s</text>`+"\n", chartBottom+24+14*row, target)
	}
	for _, f := range faults {
		y := chartBottom + 14 + 14*rows[f.target]
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="10" fill="%s"><title>%s %s %s–%s</title></rect>`+"\n",
			x(f.from), y, max(x(f.to)-x(f.from), 2), colors[f.kind], f.kind, f.target, f.from, f.to)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// The soak's checker catches what it is there to catch: after a clean run
// it finds nothing, then each defect planted in the read model — an event
// lost, an event applied twice, an entity's event applied after a later one,
// a replayed dead letter neither applied nor refused, or both — is found and
// named, and what a break or a replay may leave is excused and nothing more.
func TestSoakCheckerCatchesPlantedDefects(t *testing.T) {
	if os.Getenv("CAUSET_SOAK") == "" {
		t.Skip("the soak runs with CAUSET_SOAK=1 (make soak)")
	}
	s := newStack(t, stackOptions{partitions: 2})
	s.env = shortSchedule
	s.worker(nil)
	s.bridge(nil)
	var events eventLog
	const n = 400
	s.produceRange(0, n, twoPercent, &events)
	require.True(t, s.waitCommittedToEnd(3*time.Minute), s.progress())
	evs := events.all()
	r := &result{t: t, name: "soak_checker"}
	s.waitDrained(r, evs)
	v := s.verify(evs, true, true)
	require.Zero(t, v.lost+v.doubleApplied+v.inversions+v.dlqDup+v.dlqMissing+v.dupWorkflows+v.missingWF, "a clean run: %+v", v)

	var ok []evt
	for _, e := range evs {
		if !e.fails {
			ok = append(ok, e)
		}
	}
	lost, twice, late := ok[10], ok[20], ok[len(ok)-1]
	_, err := s.pool.Exec(s.ctx, `DELETE FROM rel_effects WHERE event_id = $1`, lost.id)
	require.NoError(t, err)
	_, err = s.pool.Exec(s.ctx, `UPDATE rel_effects SET n = n + 1 WHERE event_id = $1`, twice.id)
	require.NoError(t, err)
	_, err = s.pool.Exec(s.ctx, `INSERT INTO rel_effects (event_id, entity_id, seq, n) VALUES ($1, $2, $3, 1)`,
		s.prefix+"-planted", late.entity, late.seq-1000)
	require.NoError(t, err)
	v = s.verify(evs, true, true)
	require.Equal(t, 1, v.lost, "the deleted effect is an event lost")
	require.Equal(t, []string{lost.id}, v.examplesLost)
	require.Equal(t, 1, v.doubleApplied, "the effect counted twice is an event applied twice")
	require.Equal(t, []string{twice.id}, v.examplesDouble)
	require.Equal(t, 1, v.inversions, "an older event applied after a later one of its entity")

	// A break of the table excuses a dead letter of a succeeding event
	// with the break's error and no effect, and nothing else: the same
	// dead letter beside an effect, or a dead letter of another error in
	// place of one, is still found.
	s.breaks = &tableBreaks{}
	s.breaks.add(time.Now().Add(-time.Hour), time.Now())
	excused, both, other := ok[30], ok[40], ok[50]
	for _, e := range []evt{excused, other} {
		_, err = s.pool.Exec(s.ctx, `DELETE FROM rel_effects WHERE event_id = $1`, e.id)
		require.NoError(t, err)
	}
	s.plantDeadLetter(excused, `ERROR: column "ratio" of relation "rel_effects" does not exist (SQLSTATE 42703)`)
	s.plantDeadLetter(both, `ERROR: column "ratio" of relation "rel_effects" does not exist (SQLSTATE 42703)`)
	s.plantDeadLetter(other, `ERROR: deadlock detected (SQLSTATE 40P01)`)
	v = s.verify(evs, true, true)
	require.Equal(t, 1, v.brokenDeadLettered, "the break's dead letter without an effect is excused")
	require.Equal(t, 2, v.lost, "a dead letter of another error does not excuse a missing effect")
	require.ElementsMatch(t, []string{lost.id, other.id}, v.examplesLost)
	require.Equal(t, 2, v.dlqUnexpect, "a dead letter beside an effect, and one of another error, are unexpected")

	// An event held by a break's incident that the operator dead-lettered:
	// its record may repeat, and is excused once the incident is known.
	const incidentID = "projection-incident:rel_effects:00000000000000aa"
	held := ok[60]
	_, err = s.pool.Exec(s.ctx, `DELETE FROM rel_effects WHERE event_id = $1`, held.id)
	require.NoError(t, err)
	for range 2 {
		s.plantDeadLetter(held, "held by incident "+incidentID+", dead-lettered by the dead-letter-all signal")
	}
	v = s.verify(evs, true, true)
	require.Equal(t, 3, v.lost, "unexcused before the operator's dead-letter-all is known")
	s.breaks.deadLetteredAll(incidentID)
	v = s.verify(evs, true, true)
	require.Equal(t, 2, v.lost)
	require.Equal(t, 2, v.brokenDeadLettered)
	require.Equal(t, 1, v.dlqRepeated, "its second record is a repeat, not a duplicate")
	require.Zero(t, v.dlqDup)

	// The operator's replay of three events the breaks dead-lettered and a
	// failing one: one it applied, one it refused, one it left neither
	// applied nor refused, and the failing one, found until its replay
	// dead-letters it again — only the third is found in the end.
	replayedApplied, replayedRefused, neither := ok[70], ok[80], ok[90]
	for _, e := range []evt{replayedRefused, neither} {
		_, err = s.pool.Exec(s.ctx, `DELETE FROM rel_effects WHERE event_id = $1`, e.id)
		require.NoError(t, err)
	}
	replay := &dlqReplay{selected: map[string]bool{}, appliedBefore: map[string]bool{}}
	for _, e := range []evt{replayedApplied, replayedRefused, neither} {
		s.plantDeadLetter(e, `ERROR: column "ratio" of relation "rel_effects" does not exist (SQLSTATE 42703)`)
		replay.selected[e.id] = true
	}
	// A failing event the replay selected (its dead letter is the run's).
	failingReplayed := evs[slices.IndexFunc(evs, func(e evt) bool { return e.fails })]
	replay.selected[failingReplayed.id] = true
	time.Sleep(10 * time.Millisecond)
	replay.at = time.Now()
	s.replay = replay
	s.plantDeadLetterOfKind(replayedRefused, "invalid_event", "replay refused: rel_effects already applied a later event of entity "+replayedRefused.entity)
	v = s.verify(evs, true, true)
	require.Equal(t, 2, v.replayUnresolved, "neither applied nor refused; a failing event not dead-lettered again: %v", v.examplesReplay)
	s.plantDeadLetterOfKind(failingReplayed, "ir_eval", "on.REL_EVENT.columns.ratio: division by zero")
	v = s.verify(evs, true, true)
	require.Equal(t, 1, v.replayApplied, "applied by the replay")
	require.Equal(t, 1, v.replayRefused, "refused by the replay")
	require.Equal(t, 1, v.replayUnresolved, "neither applied nor refused")
	require.Equal(t, 3, v.lost)
	require.Contains(t, v.examplesLost, neither.id+" (replayed: neither applied nor refused)")
	require.Equal(t, 2, v.replayDeadLetters, "the refusal and the failing event's second dead letter are the replay's, not duplicates")
	require.Zero(t, v.dlqDup)
	require.Equal(t, 2, v.dlqUnexpect, "the break's dead letter of the event the replay applied is expected")

	// A replayed event both applied and refused has two outcomes.
	s.plantDeadLetterOfKind(replayedApplied, "invalid_event", "replay refused: rel_effects already applied a later event of entity "+replayedApplied.entity)
	v = s.verify(evs, true, true)
	require.Equal(t, 2, v.replayUnresolved)
	require.Contains(t, v.examplesDouble, replayedApplied.id+" (replayed: applied and refused)")
}

// plantDeadLetter writes a DLQ record of e failed with msg, of kind sql.
func (s *stack) plantDeadLetter(e evt, msg string) {
	s.t.Helper()
	s.plantDeadLetterOfKind(e, "sql", msg)
}

// plantDeadLetterOfKind writes a DLQ record of e failed with msg, of kind.
func (s *stack) plantDeadLetterOfKind(e evt, kind, msg string) {
	s.t.Helper()
	raw := json.RawMessage(s.record(e).Value)
	rec, err := dlq.Record{SchemaVersion: dlq.SchemaVersion, Event: &raw, ProjectionName: relProjection, EntityID: e.entity, ForkID: "production",
		Error: msg, ErrorKind: kind, DeadLetteredAt: time.Now()}.KafkaRecord(s.dlqTopic, []byte(e.entity))
	require.NoError(s.t, err)
	require.NoError(s.t, s.producer.ProduceSync(s.ctx, rec).FirstErr())
}
