package reliability

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
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

// onePercent: 1 % failing heads, each followed by three events of its
// entity, and one failing follower per ten heads.
var onePercent = mix{every: 100, follow: 3, failsBehind: 10}

// catchUpBound is the longest a scenario may take from heal to every
// offset committed (documented in RELIABILITY.md).
const catchUpBound = 60 * time.Second

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
	brokers := n.Kafka()
	s := newStack(t, stackOptions{partitions: 6, brokers: brokers})
	ns := &netStack{stack: s, net: n}
	u, err := url.Parse(s.dbURL)
	require.NoError(t, err)
	ns.pgPort = n.Forward(u.Host)
	u.Host = net.JoinHostPort(testenv.ServiceIP, strconv.Itoa(ns.pgPort))
	ns.temporalPort = n.Forward(s.temporal.HostPort)
	_, kp, err := net.SplitHostPort(brokers[0])
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
	detected func(bridges []*proc, worker *proc) bool
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
		2*time.Minute, 100*time.Millisecond, "events flow before the fault: %s", s.progress())

	heal := f.apply(ns, bhs, wh)
	cutAt := time.Now()
	r.fig("fault_s", f.hold.Seconds())
	detect := -1.0
	for time.Since(cutAt) < f.hold {
		if detect < 0 && f.detected != nil && f.detected(bs, w) {
			detect = time.Since(cutAt).Seconds()
		}
		time.Sleep(200 * time.Millisecond)
	}
	heal()
	healedAt := time.Now()
	// Caught up: the group has committed every event produced before the
	// heal (production goes on after it).
	backlog := s.endOffsets(s.topic)
	if f.detected != nil {
		r.fig("detected_s", fmt.Sprintf("%.1f", detect))
		require.GreaterOrEqual(t, detect, 0.0, "the fault was never detected:\n%s", bs[0].logTail(30))
	}
	require.Eventually(t, func() bool {
		committed := s.committed()
		for p, end := range backlog {
			if committed[p] < end {
				return false
			}
		}
		return true
	}, 5*time.Minute, 200*time.Millisecond, "the backlog of the fault not committed: %s\n%s", s.progress(), bs[0].logTail(30))
	catchUp := time.Since(healedAt)
	r.fig("caught_up_after_heal_s", fmt.Sprintf("%.1f", catchUp.Seconds()))
	<-produced
	require.True(t, s.waitCommittedToEnd(5*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), bs[0].logTail(30))
	// The default schedule is 0, 1, 3, 7 and 15 s: every failing event
	// has dead-lettered after this, and anything the fault handed to
	// Temporal would have too.
	time.Sleep(30 * time.Second)
	for _, b := range bs {
		require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	}
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
	require.Less(t, catchUp, catchUpBound, "caught up within the documented bound after heal")
}

func bridgeOutageLogged(bs []*proc, _ *proc) bool {
	for _, b := range bs {
		if b.logCount(`"event":"bridge_outage"`) > 0 {
			return true
		}
	}
	return false
}

func workerPollFailed(_ []*proc, w *proc) bool {
	return w.logCount(`"msg":"Failed to poll for task."`) > 0
}

// Scenario 17: the bridge's link to PostgreSQL drops every packet for 60 s.
func TestReliability17BridgePostgresBlackhole(t *testing.T) {
	p := gate(t)
	runLinkFault(t, p, linkFault{name: "blackhole_bridge_postgres", hold: 60 * time.Second,
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.pgPort, testenv.Both)
		},
		detected: bridgeOutageLogged,
	})
}

// Scenario 18: one of two bridges loses its link to Kafka for 60 s, longer
// than the group session (15 s): the group gives its partitions to the
// other, and what it still holds in flight must not be applied twice.
func TestReliability18BridgeKafkaBlackhole(t *testing.T) {
	p := gate(t)
	runLinkFault(t, p, linkFault{name: "blackhole_bridge_kafka", bridges: 2, hold: 60 * time.Second,
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.kafkaPort, testenv.Both)
		},
	})
}

// Scenario 19: the worker's link to Temporal drops every packet for 60 s
// while failing events have attempts scheduled.
func TestReliability19WorkerTemporalBlackhole(t *testing.T) {
	p := gate(t)
	runLinkFault(t, p, linkFault{name: "blackhole_worker_temporal", hold: 60 * time.Second,
		apply: func(ns *netStack, _ []*testenv.Host, w *testenv.Host) func() {
			return w.Cut(ns.temporalPort, testenv.Both)
		},
		detected: workerPollFailed,
	})
}

// Scenario 20: every link slow (1 Mbit/s each way, up to 200 ms queued)
// and lossy (5 % of packets each way) for 2 minutes.
func TestReliability20SlowLossyLinks(t *testing.T) {
	p := gate(t)
	runLinkFault(t, p, linkFault{name: "slow_lossy_links", hold: 2 * time.Minute,
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
	p := gate(t)
	runLinkFault(t, p, linkFault{name: "one_way_bridge_postgres", hold: 60 * time.Second,
		apply: func(ns *netStack, bs []*testenv.Host, _ *testenv.Host) func() {
			return bs[0].Cut(ns.pgPort, testenv.In)
		},
		detected: bridgeOutageLogged,
	})
}
