package reliability

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

// killEvery paces scenario 1's production: after a kill -9 the dead member
// keeps its partitions until its group session expires (the bridge's
// session timeout, 15 s), so each kill stalls them about that long; paced at
// this rate, every kill hits flowing events.
const killEvery = 20 * time.Second

// Scenario 1: kill -9 the bridge N times at random moments while events
// (2% failing) flow.
func TestReliability1BridgeKill9(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, []ordering{orderingEntity}, func(t *testing.T, o ordering) { bridgeKill9(t, p, o) })
}

func bridgeKill9(t *testing.T, p profile, o ordering) {
	r := newResult(t, "bridge_kill9/"+string(o))
	n := pick(p, 5000, 50000)
	kills := pick(p, 5, 20)
	s := newStack(t, stackOptions{partitions: 6, ordering: o})
	s.env = shortSchedule

	w := s.worker(nil)
	var events eventLog
	produced := s.producePaced(n, time.Duration(kills)*killEvery, twoPercent, &events)
	whileFlowing := 0

	b := s.bridge(nil)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8))
	var stalls []time.Duration
	start := time.Now()
	for k := 0; k < kills; k++ {
		// Wait until this bridge makes progress (it joined the group and
		// applies events itself), then kill it at a random moment 0-3 s later.
		t0 := time.Now()
		for time.Since(t0) < 3*time.Minute {
			if b.metric("causet_bridge_applied_total") > 0 {
				break
			}
			select {
			case <-produced:
				// Nothing left to apply: kill anyway (the commit path is still exercised).
				if s.tryCount(`SELECT count(*) FROM causet_projection_applied`) >= twoPercent.succeeding(n) {
					goto kill
				}
			default:
			}
			time.Sleep(100 * time.Millisecond)
		}
	kill:
		stalls = append(stalls, time.Since(t0))
		time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Second))))
		require.False(t, b.exited(), "bridge exited by itself:\n%s", b.logTail(30))
		select {
		case <-produced:
		default:
			whileFlowing++
		}
		b.kill()
		t.Logf("kill %d/%d at %s (applied so far %d, produced %d)", k+1, kills, time.Since(start).Round(time.Millisecond),
			s.tryCount(`SELECT count(*) FROM causet_projection_applied`), events.len())
		b = s.bridge(nil)
	}
	<-produced
	drain := time.Now()
	require.True(t, s.waitCommittedToEnd(10*time.Minute), "offsets not committed to the end: %s; bridge log:\n%s", s.progress(), b.logTail(30))
	r.fig("drain_after_last_kill_s", time.Since(drain).Round(time.Second).Seconds())
	evs := events.all()
	failing := 0
	for _, e := range evs {
		if e.fails {
			failing++
		}
	}
	got := s.waitDLQCount(int64(failing), 5*time.Minute)
	s.waitApplied(evs, 5*time.Minute)
	time.Sleep(2 * time.Second) // a late duplicate would show up now
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(evs, true, true)
	r.fig("kills", kills)
	r.fig("kills_while_producing", whileFlowing)
	r.fig("dlq_end_offset", got)
	sort.Slice(stalls, func(i, j int) bool { return stalls[i] < stalls[j] })
	r.fig("restart_to_progress_median_s", stalls[len(stalls)/2].Round(100*time.Millisecond).Seconds())
	r.fig("restart_to_progress_max_s", stalls[len(stalls)-1].Round(100*time.Millisecond).Seconds())
	r.fig("duration_s", time.Since(start).Round(time.Second).Seconds())
	r.verdict(v, true, true)
}

// Scenario 2: kill -9 the worker during a backoff; after a restart the
// schedule continues: 5 attempts in all, one DLQ record.
func TestReliability2WorkerKill9DuringBackoff(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, []ordering{orderingEntity}, workerKill9DuringBackoff)
}

func workerKill9DuringBackoff(t *testing.T, o ordering) {
	r := newResult(t, "worker_kill9_backoff/"+string(o))
	s := newStack(t, stackOptions{partitions: 3, ordering: o})
	// The default schedule: attempts at 0, 1, 3, 7, 15 s.
	w := s.worker(nil)
	b := s.bridge(nil)
	var events eventLog
	const n = 300
	s.produceRange(0, n, mix{every: 100, follow: 3}, &events) // 3 failing events, each with 3 followers
	var failing []string
	for _, e := range events.all() {
		if e.fails {
			failing = append(failing, e.id)
		}
	}
	// Wait until every failing event's workflow has 3 attempts and waits
	// in the backoff before attempt 4 (4 s).
	require.Len(t, failing, 3)
	s.waitBackoffBeforeAttempt4(failing, time.Second, time.Minute, b, w)
	w.kill()
	killedAt := time.Now()
	t.Logf("worker killed during the backoff before attempt 4")
	// Stay down past attempt 4's due time.
	time.Sleep(6 * time.Second)
	w = s.worker(nil)
	restartedAt := time.Now()
	r.fig("worker_down_s", restartedAt.Sub(killedAt).Round(100*time.Millisecond).Seconds())
	got := s.waitDLQCount(int64(len(failing)), 2*time.Minute)
	r.fig("dlq_end_offset", got)
	time.Sleep(2 * time.Second)

	dl := s.readDLQ()
	perEvent := map[string]int{}
	for _, d := range dl {
		perEvent[d.eventID]++
		require.Equal(t, "ir_eval", d.rec.ErrorKind)
		nums := []int{}
		for _, a := range d.rec.Attempts {
			nums = append(nums, a.Number)
		}
		require.Equal(t, []int{1, 2, 3, 4, 5}, nums, "attempts of %s", d.eventID)
		require.Equal(t, 5, d.rec.RetryCount)
		gaps := []string{}
		for i := 1; i < len(d.rec.Attempts); i++ {
			gaps = append(gaps, fmt.Sprintf("%.1f", d.rec.Attempts[i].StartedAt.Sub(d.rec.Attempts[0].StartedAt).Seconds()))
		}
		r.fig("attempt_offsets_s_"+strings.TrimPrefix(d.eventID, s.prefix+"-"), strings.Join(gaps, ","))
	}
	for _, id := range failing {
		st, err := s.status(wfID(id))
		require.NoError(t, err)
		require.Equal(t, contract.StateDeadLettered, st.State)
		require.Len(t, st.Attempts, 5)
		require.NotNil(t, st.DLQ)
	}
	require.False(t, b.exited())
	require.False(t, w.exited(), "restarted worker exited:\n%s", w.logTail(30))
	s.waitApplied(events.all(), time.Minute)
	v := s.verify(events.all(), true, true)
	r.fig("attempts_per_event", 5)
	r.verdict(v, true, true)
}

// waitBackoffBeforeAttempt4 waits until every failing event's workflow has
// made 3 attempts and waits, at least ahead, for its fourth. The retries
// are one activity with a server-side retry policy: after overall attempt
// 3 (activity attempt 2) fails, the pending activity waits for activity
// attempt 3 (overall attempt 4), due 4 s later.
func (s *stack) waitBackoffBeforeAttempt4(failing []string, ahead, within time.Duration, b, w *proc) {
	s.t.Helper()
	inBackoff := func() (bool, string) {
		for _, id := range failing {
			d := s.describe(wfID(id))
			if d == nil || len(d.PendingActivities) != 1 {
				return false, fmt.Sprintf("%s: %v", id, d)
			}
			pa := d.PendingActivities[0]
			if pa.Attempt != 3 || pa.State != enumspb.PENDING_ACTIVITY_STATE_SCHEDULED || pa.NextAttemptScheduleTime == nil ||
				time.Until(pa.NextAttemptScheduleTime.AsTime()) < ahead {
				return false, fmt.Sprintf("%s: %v", id, pa)
			}
		}
		return true, ""
	}
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		ok, last := inBackoff()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("workflows never reached the backoff after attempt 3; last status %s\nbridge:\n%s\nworker:\n%s",
				last, b.logTail(10), w.logTail(10))
		}
	}
}

// Scenario 3: PostgreSQL stopped for 30 s mid-stream: nothing dead-lettered
// because of it, nothing lost.
func TestReliability3PostgresOutage(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, []ordering{orderingEntity}, func(t *testing.T, o ordering) { postgresOutage(t, p, o) })
}

func postgresOutage(t *testing.T, p profile, o ordering) {
	testenv.NeedStoppablePostgres(t)
	r := newResult(t, "postgres_outage/"+string(o))
	outage := pick(p, 15*time.Second, 30*time.Second)
	n := pick(p, 6000, 20000)
	s := newStack(t, stackOptions{partitions: 6, ordering: o})
	// Default schedule (0, 1, 3, 7, 15 s): shorter than the outage, so any
	// event handed to Temporal because of the outage would dead-letter.
	w := s.worker(nil)
	b := s.bridge(nil)
	var events eventLog
	produced := s.producePaced(n, outage+20*time.Second, mix{}, &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) > n/5 },
		2*time.Minute, 100*time.Millisecond)
	testenv.StopPostgres(t)
	stoppedAt := time.Now()
	r.fig("outage_s", outage.Seconds())
	time.Sleep(outage)
	testenv.StartPostgres(t)
	r.fig("pg_restart_s", time.Since(stoppedAt).Round(100*time.Millisecond).Seconds())
	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b.logTail(30))
	time.Sleep(20 * time.Second) // anything handed to Temporal would finish its schedule now
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), false, true)
	wfs := s.workflowsOnQueue("")
	r.fig("workflows_started", len(wfs))
	r.fig("bridge_outage_log_lines", b.logCount(`"event":"bridge_outage"`))
	r.verdict(v, false, true)
	require.Zero(t, v.dlq, "no event dead-lettered because of the outage")
}

// Scenario 4: DLQ publish fails for a while (kfake answers Produce to the
// DLQ topic with NOT_ENOUGH_REPLICAS); the record lands after recovery and
// the workflow shows dead_lettered only once the DLQ coordinates exist.
func TestReliability4DLQPublishFails(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, nil, dlqPublishFails)
}

func dlqPublishFails(t *testing.T, o ordering) {
	r := newResult(t, "dlq_publish_fails/"+string(o))
	const failFor = 10 * time.Second
	cluster := testenv.KafkaCluster(t)
	s := newStack(t, stackOptions{partitions: 3, brokers: cluster.ListenAddrs(), ordering: o})
	s.env = shortSchedule

	var failing atomic.Bool
	var intercepted atomic.Int64
	failing.Store(true)
	var dlqID [16]byte
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		pr := req.(*kmsg.ProduceRequest)
		hit := false
		for _, tp := range pr.Topics {
			if tp.Topic == s.dlqTopic || (tp.TopicID != [16]byte{} && tp.TopicID == dlqID) {
				hit = true
			}
		}
		if !hit {
			return nil, nil, false
		}
		intercepted.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, pp := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = pp.Partition
				rp.ErrorCode = kerr.NotEnoughReplicas.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	adm, closeAdm := s.admin()
	td, err := adm.ListTopics(s.ctx, s.dlqTopic)
	require.NoError(t, err)
	dlqID = td[s.dlqTopic].ID
	closeAdm()

	w := s.worker(nil)
	b := s.bridge(nil)
	var events eventLog
	s.produceRange(0, 500, mix{every: 100, follow: 3}, &events) // 5 failing, each with 3 followers
	var ids []string
	for _, e := range events.all() {
		if e.fails {
			ids = append(ids, e.id)
		}
	}
	// Watch every failing workflow's status while the DLQ is broken.
	var early atomic.Int64 // dead_lettered without DLQ coordinates, or closed before them
	var sawRetryingAfter5 atomic.Bool
	stopWatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, id := range ids {
				st, err := s.status(wfID(id))
				if err != nil {
					continue
				}
				if st.State == contract.StateDeadLettered && st.DLQ == nil {
					early.Add(1)
				}
				if len(st.Attempts) >= 5 && st.State != contract.StateDeadLettered && failing.Load() {
					sawRetryingAfter5.Store(true)
				}
				if d := s.describe(wfID(id)); d != nil && d.WorkflowExecutionInfo.CloseTime != nil && failing.Load() {
					early.Add(1)
				}
			}
		}
	}()
	// Wait for the first intercepted DLQ write, then keep failing for failFor.
	require.Eventually(t, func() bool { return intercepted.Load() > 0 }, 60*time.Second, 100*time.Millisecond,
		"no DLQ publish attempted; worker log:\n%s", w.logTail(20))
	firstFail := time.Now()
	time.Sleep(failFor)
	// Nothing may be on the DLQ topic yet.
	require.Zero(t, s.waitDLQCount(1, time.Millisecond), "a DLQ record landed while Produce failed")
	for _, id := range ids {
		st, err := s.status(wfID(id))
		require.NoError(t, err)
		require.NotEqual(t, contract.StateDeadLettered, st.State, "dead_lettered while the DLQ write fails")
		require.Nil(t, st.DLQ)
	}
	failing.Store(false)
	recovered := time.Now()
	r.fig("dlq_outage_s", recovered.Sub(firstFail).Round(100*time.Millisecond).Seconds())
	r.fig("intercepted_produce_requests", intercepted.Load())
	got := s.waitDLQCount(int64(len(ids)), 2*time.Minute)
	landed := time.Since(recovered)
	r.fig("landed_after_recovery_s", landed.Round(100*time.Millisecond).Seconds())
	r.fig("dlq_end_offset", got)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			st, err := s.status(wfID(id))
			if err != nil || st.State != contract.StateDeadLettered {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond)
	close(stopWatch)
	wg.Wait()
	// The status' coordinates are where the records are.
	at := map[string]int64{}
	for _, d := range s.readDLQ() {
		at[d.eventID] = d.offset
	}
	for _, id := range ids {
		st, err := s.status(wfID(id))
		require.NoError(t, err)
		require.NotNil(t, st.DLQ)
		require.Equal(t, at[id], st.DLQ.Offset, "DLQ coordinates of %s", id)
	}
	r.fig("dead_lettered_before_coordinates", early.Load())
	r.fig("waited_in_publish_after_attempt5", sawRetryingAfter5.Load())
	require.Zero(t, early.Load(), "a workflow showed dead_lettered (or closed) before its DLQ record existed")
	require.True(t, s.waitCommittedToEnd(time.Minute), "offsets not committed to the end: %s", s.progress())
	require.False(t, b.exited())
	s.waitApplied(events.all(), time.Minute)
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
}

// temporalDev is a SQLite-backed Temporal dev server this test controls.
type temporalDev struct {
	t        *testing.T
	args     []string
	cli      string
	hostPort string
	log      string
	cmd      *exec.Cmd
	done     chan struct{}
}

func startTemporalDev(t *testing.T) *temporalDev {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	cli := filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(cli); err != nil {
		t.Skipf("scenario 5 needs ./bin/temporal (make tools): %v", err)
	}
	dir := t.TempDir()
	port := testenv.FreePort(t)
	d := &temporalDev{t: t, cli: cli, hostPort: fmt.Sprintf("127.0.0.1:%d", port), log: filepath.Join(dir, "temporal.log")}
	d.args = []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--http-port", strconv.Itoa(testenv.FreePort(t)), "--metrics-port", strconv.Itoa(testenv.FreePort(t)),
		"--ui-port", strconv.Itoa(testenv.FreePort(t)), "--log-level", "warn", "--db-filename", filepath.Join(dir, "t.db")}
	for _, sa := range testenv.SearchAttributes {
		d.args = append(d.args, "--search-attribute", sa+"=Keyword")
	}
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *temporalDev) start() {
	d.t.Helper()
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(d.t, err)
	d.cmd = exec.Command(d.cli, d.args...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(d.t, d.cmd.Start())
	d.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); f.Close(); close(done) }(d.cmd, d.done)
	require.Eventually(d.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := client.DialContext(ctx, client.Options{HostPort: d.hostPort, Logger: quietLogger()})
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err == nil
	}, 90*time.Second, 250*time.Millisecond, "temporal dev server not healthy:\n%s", tailFile(d.log, 20))
}

func (d *temporalDev) stop() {
	if d.cmd == nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
	}
	d.cmd = nil
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Scenario 5: the Temporal dev server (SQLite-backed) stopped for 30 s and
// restarted on the same port: the bridge never commits past a failure it has
// not handed off; all are handed off after the restart.
func TestReliability5TemporalOutage(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, nil, func(t *testing.T, o ordering) { temporalOutage(t, p, o) })
}

func temporalOutage(t *testing.T, p profile, o ordering) {
	r := newResult(t, "temporal_outage/"+string(o))
	outage := pick(p, 15*time.Second, 30*time.Second)
	n := pick(p, 5000, 10000)
	dev := startTemporalDev(t)
	s := newStack(t, stackOptions{partitions: 6, temporal: dev.hostPort, ordering: o})
	s.env = shortSchedule
	w := s.worker(nil)
	b := s.bridge(nil)
	var events eventLog
	produced := s.producePaced(n, outage+20*time.Second, twoPercent, &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) > n/5 },
		2*time.Minute, 100*time.Millisecond)
	dev.stop()
	stoppedAt := time.Now()
	// Sample the committed offsets during the outage.
	maxCommitted := map[int32]int64{}
	for time.Since(stoppedAt) < outage {
		for p, o := range s.committed() {
			maxCommitted[p] = max(maxCommitted[p], o)
		}
		time.Sleep(250 * time.Millisecond)
	}
	dev.start()
	r.fig("outage_s", time.Since(stoppedAt).Round(100*time.Millisecond).Seconds())
	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b.logTail(30))
	evs := events.all()
	s.waitDrained(r, evs)
	// Every failing event the bridge committed past during the outage must
	// have had its workflow started before the outage. With entity ordering
	// an event after a failure of its entity is parked behind that head, and
	// its own workflow starts only when its release fails after the head
	// settled: those are left to the end-state checks.
	firstFailure := map[string]int64{}
	for _, e := range evs {
		if f, ok := firstFailure[e.entity]; e.fails && (!ok || e.seq < f) {
			firstFailure[e.entity] = e.seq
		}
	}
	passed, unhanded, failingDuringOutage, parkedBehind := 0, 0, 0, 0
	for _, e := range evs {
		if !e.fails {
			continue
		}
		if o == orderingEntity && hasFailedBefore(firstFailure, e) {
			parkedBehind++
			continue
		}
		if e.offset >= maxCommitted[e.partition] {
			failingDuringOutage++
			continue
		}
		passed++
		d := s.describe(wfID(e.id))
		if d == nil || !d.WorkflowExecutionInfo.StartTime.AsTime().Before(stoppedAt.Add(time.Second)) {
			unhanded++
			if unhanded <= 5 {
				started := "no workflow"
				if d != nil {
					started = "workflow started " + d.WorkflowExecutionInfo.StartTime.AsTime().Sub(stoppedAt).String() + " after the stop"
				}
				t.Logf("committed past during the outage but not handed off before it: %s partition %d offset %d (max committed %d): %s",
					e.id, e.partition, e.offset, maxCommitted[e.partition], started)
			}
		}
	}
	r.fig("failing_committed_past_during_outage", passed)
	r.fig("committed_past_unhanded", unhanded)
	r.fig("failing_behind_commit_at_outage", failingDuringOutage)
	r.fig("failing_parked_not_checked", parkedBehind)
	r.fig("bridge_temporal_outage_log_lines", b.logCount(`"dependency":"temporal"`))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(evs, true, true)
	r.verdict(v, true, true)
	r.lost += unhanded
	require.Zero(t, unhanded, "offsets committed past failures not handed to Temporal")
}

// Scenario 6: three bridges in one group, one killed.
func TestReliability6ThreeBridgesOneKilled(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, nil, func(t *testing.T, o ordering) { threeBridgesOneKilled(t, p, o) })
}

func threeBridgesOneKilled(t *testing.T, p profile, o ordering) {
	r := newResult(t, "three_bridges_one_killed/"+string(o))
	n := pick(p, 6000, 20000)
	s := newStack(t, stackOptions{partitions: 6, ordering: o})
	s.env = shortSchedule
	w := s.worker(nil)
	bs := []*proc{s.bridge(nil), s.bridge(nil), s.bridge(nil)}
	var events eventLog
	produced := s.producePaced(n, 60*time.Second, twoPercent, &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) > n/4 },
		3*time.Minute, 100*time.Millisecond)
	// Kill the bridge holding the most recent work: any of them works.
	victim := bs[rand.IntN(3)]
	victim.kill()
	killedAt := time.Now()
	r.fig("killed_at_applied", s.tryCount(`SELECT count(*) FROM rel_effects`))
	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s", s.progress())
	r.fig("drain_after_kill_s", time.Since(killedAt).Round(time.Second).Seconds())
	evs := events.all()
	s.waitDrained(r, evs)
	for _, b := range bs {
		if b != victim {
			require.False(t, b.exited(), "survivor exited:\n%s", b.logTail(30))
		}
	}
	require.False(t, w.exited())
	v := s.verify(evs, true, true)
	r.verdict(v, true, true)
}

// waitDrained waits, up to five minutes each, until the DLQ holds a record
// per failing event of evs (its end offset is the figure dlq_end_offset) and
// every other event is applied, then a little longer for a late duplicate
// to show.
func (s *stack) waitDrained(r *result, evs []evt) {
	failing := 0
	for _, e := range evs {
		if e.fails {
			failing++
		}
	}
	r.fig("dlq_end_offset", s.waitDLQCount(int64(failing), 5*time.Minute))
	s.waitApplied(evs, 5*time.Minute)
	time.Sleep(2 * time.Second)
}

// badInput is one record that is not a valid envelope (or, for duplicate
// keys, one that encoding/json accepts).
type badInput struct {
	name      string
	value     []byte
	partition int32
	invalid   bool // expected to become one invalid_event DLQ record
	// kind, when set, is the expected errorKind of its one DLQ record (a
	// valid envelope that fails every attempt).
	kind string
}

func badInputs(prefix string) []badInput {
	// Raw bytes 0xff 0xfe inside a JSON string: not UTF-8.
	utf8Bad := `{"eventId":"` + prefix + "-utf8-\xff\xfe" + `","eventType":"REL_EVENT","entityId":"bad","forkId":"production","payload":{"one":1,"d":1}}`
	env := func(id, payload string) string {
		return fmt.Sprintf(`{"eventId":%q,"eventType":"REL_EVENT","entityId":"bad","forkId":"production","payload":%s}`, id, payload)
	}
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	blob := `{"one":1,"d":1,"blob":"` + strings.Repeat("x", 10<<20) + `"}`
	return []badInput{
		{name: "not_json", value: []byte("this is not JSON at all \x00\x01"), invalid: true},
		{name: "invalid_utf8", value: []byte(utf8Bad), invalid: true},
		{name: "deep_nesting_10000", value: []byte(env(prefix+"-deep", deep)), invalid: true},
		{name: "huge_int_payload", value: []byte(env(prefix+"-hugeint", `{"one":123456789012345678901234567890,"d":1}`)), invalid: true},
		{name: "huge_float_payload", value: []byte(env(prefix+"-hugefloat", `{"one":1e400,"d":1}`)), invalid: true},
		{name: "huge_sequence", value: []byte(fmt.Sprintf(`{"eventId":"%s-hugeseq","eventType":"REL_EVENT","entityId":"bad","forkId":"production","sequence":99999999999999999999999,"payload":{"one":1,"d":1}}`, prefix)), invalid: true},
		{name: "empty_value", value: []byte{}, invalid: true},
		{name: "duplicate_keys", value: []byte(fmt.Sprintf(`{"eventId":"%s-dup-a","eventId":"%s-dup-b","eventType":"REL_EVENT","entityId":"bad","forkId":"production","payload":{"one":1,"d":1,"one":2}}`, prefix, prefix)), invalid: false},
		{name: "payload_10mb", value: []byte(env(prefix+"-10mb", blob)), partition: 1, invalid: true},
		// Within the default 1 MB broker limit, but its DLQ record (base64) is not.
		{name: "not_json_800kb", value: []byte(strings.Repeat("not json ", 800_000/9)), partition: 2, invalid: true},
		// A valid envelope just under event.MaxSize (1 MiB): its payload is
		// past what a workflow input may carry (event.MaxEncodedPayloadBytes).
		{name: "valid_1mb", value: []byte(env(prefix+"-valid1mb", `{"one":1,"d":0,"blob":"`+strings.Repeat("y", 1_040_000)+`"}`)),
			partition: 3, invalid: true},
		// The largest payload a workflow input carries, failing every attempt:
		// retried through Temporal and dead-lettered whole.
		{name: "valid_500kb_failing", value: []byte(env(prefix+"-valid500kb", `{"one":1,"d":0,"blob":"`+strings.Repeat("y", event.MaxEncodedPayloadBytes-1000)+`"}`)),
			partition: 3, kind: "ir_eval"},
	}
}

// Scenario 7: bad input on the events topic.
func TestReliability7BadInput(t *testing.T) {
	p := gate(t)
	forOrderings(t, p, []ordering{orderingEntity, orderingNone}, badInputScenario)
}

func badInputScenario(t *testing.T, o ordering) {
	r := newResult(t, "bad_input/"+string(o))
	big := "16777216"
	const parts = 4
	s := newStack(t, stackOptions{partitions: parts, ordering: o,
		topicConfig:  map[string]*string{"max.message.bytes": &big},
		producerOpts: []kgo.Opt{kgo.ProducerBatchMaxBytes(16 << 20)},
	})
	s.env = shortSchedule
	w := s.worker(nil)
	b := s.bridge(nil)
	inputs := badInputs(s.prefix)
	offsets := map[string]int64{}
	for _, in := range inputs {
		res := s.producer.ProduceSync(s.ctx, &kgo.Record{Partition: in.partition, Key: []byte("bad-" + in.name), Value: in.value})
		require.NoError(t, res.FirstErr(), in.name)
		offsets[in.name] = res[0].Record.Offset
	}
	// A good event after the bad ones on each partition: offsets move on.
	var events eventLog
	for p := int32(0); p < parts; p++ {
		s.produce([]evt{{id: fmt.Sprintf("%s-good-%d", s.prefix, p), entity: fmt.Sprintf("ent-%d", p), seq: int64(p), partition: p}}, &events)
	}
	// Sample the bridge's memory while it works.
	var peakRSS int64
	deadline := time.Now().Add(90 * time.Second)
	toEnd := false
	for time.Now().Before(deadline) && !b.exited() {
		rss, hwm := b.memKB()
		peakRSS = max(peakRSS, rss, hwm)
		if s.committedToEnd() {
			toEnd = true
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	rss, hwm := b.memKB()
	peakRSS = max(peakRSS, hwm)
	crashed := b.exited()
	r.fig("bridge_crashed", crashed)
	r.fig("bridge_rss_mb", rss/1024)
	r.fig("bridge_peak_rss_mb", peakRSS/1024)
	committed := s.committed()
	ends := s.endOffsets(s.topic)
	for p := int32(0); p < parts; p++ {
		r.fig(fmt.Sprintf("committed_p%d", p), fmt.Sprintf("%d/%d", committed[p], ends[p]))
	}
	// The failing valid event goes through Temporal (short schedule: ~3 s).
	time.Sleep(8 * time.Second)

	dl := s.readDLQ()
	perInput := map[string]int{}
	for _, d := range dl {
		for _, in := range inputs {
			if d.rec.Source.Partition == in.partition && d.rec.Source.Offset == offsets[in.name] {
				perInput[in.name]++
				wantKind := "invalid_event"
				if in.kind != "" {
					wantKind = in.kind
				}
				if d.rec.ErrorKind != wantKind {
					t.Errorf("%s: errorKind %q, want %s", in.name, d.rec.ErrorKind, wantKind)
				}
				switch tr := d.rec.Truncated; {
				case in.kind == "" && tr == nil && !bytes.Equal(in.value, d.rec.RawValue):
					t.Errorf("%s: raw bytes not kept (%d bytes in DLQ, %d produced)", in.name, len(d.rec.RawValue), len(in.value))
				case tr != nil:
					// Too large to carry whole: a prefix, the size and the hash of the original.
					whole := in.value
					if tr.Field == "event" {
						whole = nil // the envelope as re-encoded by the worker; size and hash checked by the dlq tests
					}
					sum := sha256.Sum256(whole)
					if whole != nil && (tr.Size != len(whole) || tr.SHA256 != hex.EncodeToString(sum[:]) || !bytes.HasPrefix(whole, d.rec.RawValue)) {
						t.Errorf("%s: truncated record does not describe the original: %+v", in.name, tr)
					}
					if d.size > dlq.MaxValueBytes {
						t.Errorf("%s: DLQ record of %d bytes exceeds %d", in.name, d.size, dlq.MaxValueBytes)
					}
				}
				t.Logf("%s: DLQ error %q (%d bytes)", in.name, abbreviate(d.rec.Error, 160), d.size)
			}
		}
	}
	okInputs := 0
	for _, in := range inputs {
		want := 0
		if in.invalid || in.kind != "" {
			want = 1
		}
		r.fig("dlq_"+in.name, perInput[in.name])
		if perInput[in.name] == want {
			okInputs++
		} else {
			t.Errorf("%s: %d invalid_event DLQ records, want %d", in.name, perInput[in.name], want)
		}
	}
	app := s.appliedIn(relProjection)
	r.fig("duplicate_keys_applied_as", fmt.Sprintf("dup-a:%d,dup-b:%d,n=%d", app[s.prefix+"-dup-a"], app[s.prefix+"-dup-b"], app[s.prefix+"-dup-b"]))
	r.fig("inputs_as_expected", fmt.Sprintf("%d/%d", okInputs, len(inputs)))
	if !toEnd {
		t.Errorf("offsets did not move on within 90 s: committed %v, ends %v; bridge log:\n%s", committed, ends, abbreviate(b.logTail(4), 3000))
		r.fig("bridge_dlq_write_failures", b.logCount("cannot dead-letter poison record"))
	}
	r.fig("worker_dlq_publish_failures", w.logCount("MESSAGE_TOO_LARGE"))
	require.False(t, crashed, "bridge crashed:\n%s", b.logTail(30))
	require.Less(t, peakRSS, int64(512<<10), "bridge memory bounded (peak RSS < 512 MB)")
	stalled := 0
	defer func() { r.fig("stalled_good_events", stalled) }()
	for _, e := range events.all() {
		if toEnd {
			require.Equal(t, 1, app[e.id], "good event after the bad ones applied once")
		} else if app[e.id] == 0 {
			stalled++ // still on the topic behind the wedged record: not lost, not applied
		}
	}
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
