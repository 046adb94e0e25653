package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// Scenarios 17-21 cut links instead of processes: each causet process runs
// on a test host of its own (a network namespace, testenv.Network) and
// reaches PostgreSQL, Kafka and Temporal over a veth link, where a fault
// drops packets without a word: no reset, no refusal, as a firewall change,
// a hung node or a network partition does. They run in the default
// configuration (the default retry schedule, entity ordering) with 1 % of
// the events failing, and check what scenarios 1-7 check: nothing lost,
// nothing applied twice, order kept, and no dead letter or workflow the
// fault caused, plus how long the fault took to detect and how long the
// system took to catch up after the link healed.

// gateLinkScenario is gate for scenarios 17-22, which run side by side
// with 24 and 25 (scripts/reliability.sh: -parallel 8) once the scenarios that stop the
// shared PostgreSQL are done: each has its own test hosts, Kafka,
// topics, database and task queue, and most of its time is the fault's hold.
func gateLinkScenario(t *testing.T) profile {
	t.Helper()
	p := gate(t)
	t.Parallel()
	return p
}

// onePercent: 1 % failing heads, each followed by three events of its
// entity, and one failing follower per ten heads.
var onePercent = mix{every: 100, follow: 3, failsBehind: 10}

// detectBound is the longest a scenario may take from the cut to the
// first sign that a process took it for an outage (documented in
// RELIABILITY.md; the target, met on an idle machine, is 15 s).
const detectBound = 30 * time.Second

// catchUpBound is the longest a scenario may take from heal to every
// offset committed (documented in RELIABILITY.md; the bridge's backoff cap,
// 10 s, bounds it, and 2.2 s is the most measured).
const catchUpBound = 30 * time.Second

// netStack is a stack whose processes run on test hosts.
type netStack struct {
	*stack
	net *testenv.Network
	// Ports on testenv.ServiceIP: PostgreSQL and Temporal forwarded,
	// Kafka (kfake) listening.
	pgPort, temporalPort, kafkaPort int
}

func newNetStack(t *testing.T) *netStack {
	t.Helper()
	n := testenv.NewNetwork(t)
	return onHosts(t, newStack(t, stackOptions{partitions: 6, brokers: n.Kafka()}), n)
}

// onHosts points the processes of s, whose Kafka is n.Kafka(), at the
// services on testenv.ServiceIP.
func onHosts(t *testing.T, s *stack, n *testenv.Network) *netStack {
	t.Helper()
	ns := &netStack{stack: s, net: n}
	u, err := url.Parse(s.dbURL)
	require.NoError(t, err)
	ns.pgPort = n.Forward(u.Host)
	u.Host = net.JoinHostPort(testenv.ServiceIP, strconv.Itoa(ns.pgPort))
	ns.temporalPort = n.Forward(s.temporal.HostPort)
	_, kp, err := net.SplitHostPort(s.brokers[0])
	require.NoError(t, err)
	ns.kafkaPort, _ = strconv.Atoi(kp)
	s.env["DATABASE_URL"] = u.String()
	s.env["TEMPORAL_ADDRESS"] = net.JoinHostPort(testenv.ServiceIP, strconv.Itoa(ns.temporalPort))
	return ns
}

// linkFault is one scenario's fault: apply cuts, slows or loses on the
// given hosts and returns what heals it; detected, when set, says whether
// the processes have noticed.
type linkFault struct {
	name     string
	bridges  int
	hold     time.Duration
	apply    func(ns *netStack, bridges []*testenv.Host, worker *testenv.Host) (heal func())
	detected func(bridges []*proc, worker *proc, since time.Time) bool
	// isolated: the first bridge is cut from the group and loses its
	// partitions; from when the other bridge has them (and so has claimed
	// them in PostgreSQL) until the heal it must apply nothing, whether it
	// has learned of its loss or not (fencing); from when it says so (if
	// before the heal) it must also hand off and dead-letter nothing.
	isolated bool
}

// bridgeWork is what a bridge has done with events so far: applied (or
// found applied), handed off and dead-lettered; -1 when its metrics
// cannot be read.
func bridgeWork(b *proc) float64 {
	total := 0.0
	for _, name := range []string{"causet_bridge_applied_total", "causet_bridge_handed_off_total", "causet_bridge_dead_lettered_total"} {
		v := b.metric(name)
		if v < 0 {
			return -1
		}
		total += v
	}
	return total
}

// logSince counts p's log lines that contain sub and were written at or
// after since (by their "time" field).
func (p *proc) logSince(sub string, since time.Time) int {
	b, _ := os.ReadFile(p.log)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, sub) {
			continue
		}
		var l struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && !l.Time.Before(since) {
			n++
		}
	}
	return n
}

func runLinkFault(t *testing.T, p profile, f linkFault) {
	r := newResult(t, f.name+"/"+string(orderingEntity))
	n := pick(p, 6000, 20000)
	ns := newNetStack(t)
	s := ns.stack
	wh := ns.net.Host("worker")
	w := s.startOn(wh, "worker", nil, "worker")
	var (
		bhs []*testenv.Host
		bs  []*proc
	)
	for i := range max(f.bridges, 1) {
		h := ns.net.Host(fmt.Sprintf("bridge-%d", i+1))
		bhs = append(bhs, h)
		bs = append(bs, s.startOn(h, "bridge", nil, "bridge"))
	}
	var events eventLog
	produced := s.producePaced(n, f.hold+40*time.Second, onePercent, &events)
	require.Eventually(t, func() bool { return s.tryCount(`SELECT count(*) FROM rel_effects`) > n/5 },
		2*time.Minute, 100*time.Millisecond, "events flow before the fault: %s", s.progressLater())

	appliedAtCut := s.tryCount(`SELECT count(*) FROM rel_effects`)
	heal := f.apply(ns, bhs, wh)
	cutAt := time.Now()
	r.fig("fault_s", f.hold.Seconds())
	detect := -1.0
	workAtDetect, workAtLoss := -1.0, -1.0
	appliedAtClaim := -1.0
	var detectedAt time.Time
	for time.Since(cutAt) < f.hold {
		if detect < 0 && f.detected != nil && f.detected(bs, w, cutAt) {
			detect = time.Since(cutAt).Seconds()
			detectedAt = time.Now()
			if f.isolated {
				workAtDetect = bridgeWork(bs[0])
			}
		}
		// The new owner claims the partitions as it opens them, within
		// moments of their assignment.
		if f.isolated && appliedAtClaim < 0 && !detectedAt.IsZero() && time.Since(detectedAt) >= 2*time.Second {
			appliedAtClaim = bs[0].metric("causet_bridge_applied_total")
		}
		if f.isolated && workAtLoss < 0 && bs[0].logSince(`"msg":"partitions lost`, cutAt)+bs[0].logSince(`"msg":"partitions revoked"`, cutAt) > 0 {
			workAtLoss = bridgeWork(bs[0])
			r.fig("isolated_lost_partitions_after_s", fmt.Sprintf("%.1f", time.Since(cutAt).Seconds()))
			if workAtDetect >= 0 {
				// Between the group's reassignment and the bridge
				// learning of it: what it had fetched before the cut,
				// which the dedupe ledger keeps from applying twice.
				r.fig("isolated_work_before_it_learned", workAtLoss-workAtDetect)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.fig("applied_during_fault", s.tryCount(`SELECT count(*) FROM rel_effects`)-appliedAtCut)
	if f.isolated {
		require.GreaterOrEqual(t, appliedAtClaim, 0.0, "the other bridge took the partitions within the fault")
		appliedAtHeal := bs[0].metric("causet_bridge_applied_total")
		r.fig("isolated_applied_after_claim", appliedAtHeal-appliedAtClaim)
		r.fig("isolated_fenced_partitions", bs[0].metric("causet_bridge_partitions_fenced_total"))
		require.Equal(t, appliedAtClaim, appliedAtHeal, "fenced: the cut bridge applied events of partitions the other had claimed")
	}
	switch {
	case f.isolated && workAtLoss >= 0:
		workAtHeal := bridgeWork(bs[0])
		r.fig("isolated_work_after_loss", workAtHeal-workAtLoss)
		require.Equal(t, workAtLoss, workAtHeal, "the isolated bridge applied, handed off or dead-lettered events after it lost its partitions")
	case f.isolated:
		// franz-go's heartbeat retries can outlast the cut on a loaded
		// machine: the bridge then learns nothing before the heal, and
		// the dedupe ledger alone keeps what it does meanwhile once.
		r.fig("isolated_lost_partitions_after_s", "not before the heal")
		if workAtDetect >= 0 {
			r.fig("isolated_work_before_it_learned", bridgeWork(bs[0])-workAtDetect)
		}
	}
	heal()
	healedAt := time.Now()
	// Caught up: the group has committed every event produced before the
	// heal (production goes on after it).
	backlog := s.endOffsets(s.topic)
	if f.detected != nil {
		r.fig("detected_s", fmt.Sprintf("%.1f", detect))
		require.GreaterOrEqual(t, detect, 0.0, "the fault was never detected:\n%s", bs[0].logTail(30))
		require.Less(t, detect, detectBound.Seconds(), "detected within the documented bound")
	}
	require.Eventually(t, func() bool {
		committed := s.committed()
		for p, end := range backlog {
			if committed[p] < end {
				return false
			}
		}
		return true
	}, 5*time.Minute, 200*time.Millisecond, "the backlog of the fault not committed: %s\n%s", s.progressLater(), bs[0].logTail(30))
	catchUp := time.Since(healedAt)
	r.fig("caught_up_after_heal_s", fmt.Sprintf("%.1f", catchUp.Seconds()))
	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), bs[0].logTail(30))
	// Settled: every failing event dead-lettered, anything the fault handed
	// to Temporal too, and every key released. A failing event parked
	// behind a head runs its own schedule (0, 1, 3, 7, 15 s) only once the
	// head is dead-lettered, so a chain takes a schedule per link: a fixed
	// wait of one schedule once ended a CI run before the second link did.
	require.True(t, s.waitSettled(r, events.all(), 5*time.Minute), "not settled after the heal: %s", s.progress())
	for _, b := range bs {
		require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	}
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
	require.Less(t, catchUp, catchUpBound, "caught up within the documented bound after heal")
}

func bridgeOutageLogged(bs []*proc, _ *proc, since time.Time) bool {
	for _, b := range bs {
		if b.logSince(`"event":"bridge_outage"`, since) > 0 {
			return true
		}
	}
	return false
}

func workerPollFailed(_ []*proc, w *proc, since time.Time) bool {
	return w.logSince(`"msg":"Failed to poll for task."`, since) > 0
}

// Scenario 17: the bridge's link to PostgreSQL drops every packet for 60 s.
func TestReliability17BridgePostgresBlackhole(t *testing.T) {
	p := gateLinkScenario(t)
	runLinkFault(t, p, linkFault{name: "blackhole_bridge_postgres", hold: pick(p, 45*time.Second, 60*time.Second),
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.pgPort, testenv.Both)
		},
		detected: bridgeOutageLogged,
	})
}

// Scenario 18: one of two bridges loses its link to Kafka for 60 s, longer
// than the group session (15 s): the group gives its partitions to the
// other, what it still holds in flight must not be applied twice, and once
// it has lost its partitions it applies nothing more.
func TestReliability18BridgeKafkaBlackhole(t *testing.T) {
	p := gateLinkScenario(t)
	runLinkFault(t, p, linkFault{name: "blackhole_bridge_kafka", bridges: 2, hold: 60 * time.Second,
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.kafkaPort, testenv.Both)
		},
		// Detected when the group hands the cut bridge's partitions to
		// the other.
		detected: func(bs []*proc, _ *proc, since time.Time) bool {
			return bs[1].logSince(`"msg":"partitions assigned"`, since) > 0
		},
		isolated: true,
	})
}

// Scenario 19: the worker's link to Temporal drops every packet for 60 s
// while failing events have attempts scheduled.
func TestReliability19WorkerTemporalBlackhole(t *testing.T) {
	p := gateLinkScenario(t)
	runLinkFault(t, p, linkFault{name: "blackhole_worker_temporal", hold: pick(p, 45*time.Second, 60*time.Second),
		apply: func(ns *netStack, _ []*testenv.Host, w *testenv.Host) func() {
			return w.Cut(ns.temporalPort, testenv.Both)
		},
		detected: workerPollFailed,
	})
}

// Scenario 20: every link slow (1 Mbit/s each way, up to 200 ms queued)
// and lossy (5 % of packets each way) for 2 minutes.
func TestReliability20SlowLossyLinks(t *testing.T) {
	p := gateLinkScenario(t)
	runLinkFault(t, p, linkFault{name: "slow_lossy_links", hold: pick(p, time.Minute, 2*time.Minute),
		apply: func(_ *netStack, bs []*testenv.Host, w *testenv.Host) func() {
			var heals []func()
			for _, h := range append(bs, w) {
				heals = append(heals, h.Slow("1mbit", "200ms"), h.Lossy(5))
			}
			return func() {
				for _, heal := range heals {
					heal()
				}
			}
		},
	})
}

// Scenario 21: a one-way partition between the bridge and PostgreSQL for
// 60 s: its packets arrive, the replies are dropped.
func TestReliability21OneWayPartition(t *testing.T) {
	p := gateLinkScenario(t)
	runLinkFault(t, p, linkFault{name: "one_way_bridge_postgres", hold: pick(p, 45*time.Second, 60*time.Second),
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.pgPort, testenv.In)
		},
		detected: bridgeOutageLogged,
	})
}

// Scenario 22: the write path on silent links. The relay's link to Kafka
// drops every packet for 60 s while clients submit: intents are accepted,
// their events wait in the ledger and are published after the heal, in
// order. Then the runtime's link to PostgreSQL drops every packet for 60 s
// while clients POST: every answer is a 503 (nothing written) or a 504
// (outcome unknown: ask GET /v1/intents/{id}) within the request deadline,
// none hangs and none is a 200 that the ledger lacks; re-submitted after the
// heal, each intent is recorded once.
func TestReliability22WritePathSilentLinks(t *testing.T) {
	p := gateLinkScenario(t)
	r := newResult(t, "writepath_silent_links/entity")
	const hold = 60 * time.Second
	before, during, cut := pick(p, 1000, 2000), pick(p, 2000, 5000), pick(p, 300, 1000)
	n := testenv.NewNetwork(t)
	w := newWritePath(t, stackOptions{partitions: 6, brokers: n.Kafka()})
	ns := onHosts(t, w.stack, n)
	rh, lh := n.Host("runtime"), n.Host("relay")
	wk := w.worker(nil)
	b := w.bridge(nil)
	w.startRuntimeOn(rh)
	rl := w.startOn(lh, "relay", nil, "relay")
	cl := w.client(wpCallers)
	ins := w.gen.slice(0, before+during+cut)
	outs := submitPaced(w.ctx, cl, ins[:before], wpCallers, 0)
	_, ok := w.waitPublished(time.Minute)
	require.True(t, ok, "the first intents' events not published:\n%s", rl.logTail(20))

	// 1. The relay's link to Kafka.
	heal := lh.Cut(ns.kafkaPort, testenv.Both)
	cutAt := time.Now()
	outs = append(outs, submitPaced(w.ctx, cl, ins[before:before+during], wpCallers, hold-10*time.Second)...)
	time.Sleep(time.Until(cutAt.Add(hold)))
	backlog := w.unpublished()
	r.fig("relay_kafka_cut_s", hold.Seconds())
	r.fig("backlog_at_heal", backlog)
	require.Positive(t, backlog, "the events of intents accepted during the cut wait in the ledger")
	heal()
	d, ok := w.waitPublished(3 * time.Minute)
	require.True(t, ok, "backlog not published after the heal: %d unpublished\n%s", w.unpublished(), rl.logTail(30))
	r.fig("relay_caught_up_after_heal_s", durS(d))
	require.Less(t, d, catchUpBound, "published within the documented bound after the heal")

	// 2. The runtime's link to PostgreSQL.
	insC := ins[before+during:]
	heal = rh.Cut(ns.pgPort, testenv.Both)
	cutAt = time.Now()
	codes, took := postOnce(w.rtURL, insC, wpCallers)
	answers := map[int]int{}
	var ids503, ids200 []string
	for k, c := range codes {
		answers[c]++
		switch c {
		case http.StatusServiceUnavailable:
			ids503 = append(ids503, insC[k].IntentID)
		case http.StatusOK:
			ids200 = append(ids200, insC[k].IntentID)
		}
	}
	slices.Sort(took)
	r.fig("posts_during_cut", len(insC))
	r.fig("answered_503", answers[http.StatusServiceUnavailable])
	r.fig("answered_504_outcome_unknown", answers[http.StatusGatewayTimeout])
	r.fig("answered_200", answers[http.StatusOK])
	r.fig("no_answer", answers[-1])
	r.fig("answer_median_s", durS(took[len(took)/2]))
	r.fig("answer_max_s", durS(took[len(took)-1]))
	require.Zero(t, answers[-1], "every POST answered (the client waits 60 s)")
	require.Less(t, took[len(took)-1], 45*time.Second, "answered within the request deadline (30 s) and its margin")
	time.Sleep(time.Until(cutAt.Add(hold)))
	heal()
	var recorded503, recorded200 int
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
		defer cancel()
		return w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE intent_id = ANY($1)), count(*) FILTER (WHERE intent_id = ANY($2)) FROM causet_intents`,
			ids503, ids200).Scan(&recorded503, &recorded200) == nil
	}, time.Minute, 200*time.Millisecond)
	r.fig("recorded_of_503", recorded503)
	require.Zero(t, recorded503, "an intent answered 503 was recorded")
	require.Equal(t, len(ids200), recorded200, "an intent answered 200 is in the ledger")
	outs = append(outs, submitPaced(w.ctx, cl, insC, wpCallers, 0)...)

	r.intents(w.checkIntents(ins, outs))
	_, tc := w.settle(r, 5*time.Minute)
	r.fig("relay_resends", tc.resends)
	require.False(t, rl.exited(), "relay exited:\n%s", rl.logTail(30))
	require.False(t, w.rt.exited(), "runtime exited:\n%s", w.rt.logTail(30))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, wk.exited(), "worker exited:\n%s", wk.logTail(30))
}
