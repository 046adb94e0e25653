package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// ServiceIP is the address the test hosts of a [Network] reach the services
// on: it sits on this namespace's loopback, so the tests reach it too.
const ServiceIP = "10.77.0.1"

const hostsHowTo = "needs root, ip (iproute2) and nft (Debian's nftables; scripts/test-tools.sh installs it)"

// Network is a set of test hosts: Linux network namespaces, each joined to
// this one by a veth pair, so that the processes run on a host cross a link
// the test can cut, make lossy or slow. Services stay in this namespace and
// are reached on ServiceIP: kfake listens there ([Network.Kafka]), other
// servers are forwarded there from loopback ([Network.Forward]); each
// service has its own port, so a fault can take one service's link alone.
// Everything is removed when the test ends. Without root, ip or nft the test
// skips (fails under CI=true).
type Network struct {
	t  testing.TB
	id string
	// subnet is the second octet of the hosts' links (10.subnet.k.0/24),
	// one per test binary so that two binaries' hosts never share one.
	subnet int
}

var networkSeq, hostSeq atomic.Int32

// NewNetwork prepares ServiceIP and returns an empty network.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "NewNetwork %s: not root", hostsHowTo)
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "NewNetwork %s: %s not on PATH", hostsHowTo, tool)
		}
	}
	if out, err := run("", "ip", "-4", "addr", "show", "dev", "lo"); err != nil {
		t.Fatalf("testenv: ip addr: %v: %s", err, out)
	} else if !strings.Contains(out, " "+ServiceIP+"/") {
		// It stays: removing it could cut another test binary's hosts.
		if out, err := run("", "ip", "addr", "add", ServiceIP+"/32", "dev", "lo"); err != nil && !strings.Contains(out, "File exists") {
			t.Fatalf("testenv: add %s to lo: %v: %s", ServiceIP, err, out)
		}
	}
	return &Network{t: t, id: fmt.Sprintf("%x%x", os.Getpid()%0x10000, networkSeq.Add(1)), subnet: 78 + os.Getpid()%150}
}

// Host is one test host: a network namespace with a veth link to this one.
type Host struct {
	net  *Network
	Name string
	// NS is the namespace's name (ip netns exec NS …).
	NS string
	// IP is the host's address, reachable from this namespace (a process
	// on the host serves its metrics there).
	IP   string
	link [2]string // veth ends: here, on the host
}

// Host adds a host named name (for logs).
func (n *Network) Host(name string) *Host {
	n.t.Helper()
	k := hostSeq.Add(1)
	if k > 250 {
		n.t.Fatal("testenv: at most 250 hosts per test binary")
	}
	h := &Host{net: n, Name: name, NS: fmt.Sprintf("causet-%s-%d", n.id, k),
		IP: fmt.Sprintf("10.%d.%d.2", n.subnet, k), link: [2]string{fmt.Sprintf("cv%s%da", n.id, k), fmt.Sprintf("cv%s%db", n.id, k)}}
	gw := fmt.Sprintf("10.%d.%d.1", n.subnet, k)
	steps := [][]string{
		{"ip", "netns", "add", h.NS},
		{"ip", "link", "add", h.link[0], "type", "veth", "peer", "name", h.link[1]},
		{"ip", "link", "set", h.link[1], "netns", h.NS},
		{"ip", "addr", "add", gw + "/24", "dev", h.link[0]},
		{"ip", "link", "set", h.link[0], "up"},
		{"ip", "-n", h.NS, "addr", "add", h.IP + "/24", "dev", h.link[1]},
		{"ip", "-n", h.NS, "link", "set", h.link[1], "up"},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		{"ip", "-n", h.NS, "route", "add", "default", "via", gw},
	}
	n.t.Cleanup(func() {
		_, _ = run("", "ip", "link", "del", h.link[0])
		_, _ = run("", "ip", "netns", "del", h.NS)
	})
	for _, s := range steps {
		if out, err := run("", s[0], s[1:]...); err != nil {
			n.t.Fatalf("testenv: host %s: %s: %v: %s", name, strings.Join(s, " "), err, out)
		}
	}
	return h
}

// Command is name run on the host (`ip netns exec`, which execs it: the
// process keeps the PID and signals of the returned command).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Direction says which packets of a link a fault drops.
type Direction int

const (
	// Both directions: a blackhole.
	Both Direction = iota
	// Out drops what the host sends (requests vanish).
	Out
	// In drops what the host receives (requests arrive, replies vanish).
	In
)

var faultSeq atomic.Int32

// Cut drops, without a reset or an error to either end, the packets
// between the host and ServiceIP:port (every port: 0) in dir, until heal
// or the test's end.
func (h *Host) Cut(port int, dir Direction) (heal func()) {
	h.net.t.Helper()
	match := func(side string) string {
		if port == 0 {
			return fmt.Sprintf("ip %saddr %s", side, ServiceIP)
		}
		p := "dport"
		if side == "s" {
			p = "sport"
		}
		return fmt.Sprintf("ip %saddr %s tcp %s %d", side, ServiceIP, p, port)
	}
	var rules []string
	if dir == Both || dir == Out {
		rules = append(rules, "chain out { type filter hook output priority -10; policy accept; "+match("d")+" drop; }")
	}
	if dir == Both || dir == In {
		rules = append(rules, "chain in { type filter hook input priority -10; policy accept; "+match("s")+" drop; }")
	}
	return h.nftTable(rules)
}

// Lossy drops percent % of the packets the host sends and of those it
// receives, at random, until heal or the test's end.
func (h *Host) Lossy(percent int) (heal func()) {
	h.net.t.Helper()
	rule := fmt.Sprintf("numgen random mod 100 < %d drop;", percent)
	return h.nftTable([]string{
		"chain out { type filter hook output priority -10; policy accept; " + rule + " }",
		"chain in { type filter hook input priority -10; policy accept; " + rule + " }",
	})
}

// Slow limits the link to rate (tc's units: 512kbit, 2mbit) each way with a
// token bucket (tbf), queueing up to latency (200ms) before it drops, until
// heal or the test's end. (A fixed delay needs netem, which not every
// kernel has.)
func (h *Host) Slow(rate, latency string) (heal func()) {
	h.net.t.Helper()
	for _, args := range [][]string{
		{"tc", "qdisc", "replace", "dev", h.link[0], "root", "tbf", "rate", rate, "burst", "16kb", "latency", latency},
		{"ip", "netns", "exec", h.NS, "tc", "qdisc", "replace", "dev", h.link[1], "root", "tbf", "rate", rate, "burst", "16kb", "latency", latency},
	} {
		if out, err := run("", args[0], args[1:]...); err != nil {
			h.net.t.Fatalf("testenv: slow host %s: %v: %s", h.Name, err, out)
		}
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			_, _ = run("", "tc", "qdisc", "del", "dev", h.link[0], "root")
			_, _ = run("", "ip", "netns", "exec", h.NS, "tc", "qdisc", "del", "dev", h.link[1], "root")
		})
	}
	h.net.t.Cleanup(heal)
	return heal
}

func (h *Host) nftTable(chains []string) (heal func()) {
	table := fmt.Sprintf("causet_fault_%d", faultSeq.Add(1))
	ruleset := "table inet " + table + " {\n" + strings.Join(chains, "\n") + "\n}\n"
	if out, err := run(ruleset, "ip", "netns", "exec", h.NS, "nft", "-f", "-"); err != nil {
		h.net.t.Fatalf("testenv: nft on host %s: %v: %s\n%s", h.Name, err, out, ruleset)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if out, err := run("", "ip", "netns", "exec", h.NS, "nft", "delete", "table", "inet", table); err != nil {
				h.net.t.Errorf("testenv: heal host %s: %v: %s", h.Name, err, out)
			}
		})
	}
	h.net.t.Cleanup(heal)
	return heal
}

// Forward serves target (host:port on loopback) on ServiceIP at a port of
// its own, which it returns, copying bytes both ways, until the test ends.
// A server that hands out no other address of its own (PostgreSQL, the
// Temporal frontend) is reached by the hosts this way, on a link of theirs.
func (n *Network) Forward(target string) (port int) {
	n.t.Helper()
	addr, _ := forward(n.t, ServiceIP, target)
	_, p, _ := net.SplitHostPort(addr)
	port, _ = strconv.Atoi(p)
	return port
}

// Forward serves target on a loopback port of its own until the test ends
// and returns its address, and the client port of each connection it
// accepts (the port SilenceLink takes), as they come.
func Forward(t testing.TB, target string) (addr string, accepted <-chan int) {
	t.Helper()
	return forward(t, "127.0.0.1", target)
}

func forward(t testing.TB, ip, target string) (string, <-chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("testenv: forward %s: %v", target, err)
	}
	ports := make(chan int, 256)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			select {
			case ports <- in.RemoteAddr().(*net.TCPAddr).Port:
			default: // nobody reads them
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	return ln.Addr().String(), ports
}

// pipe copies until either side ends, then ends both, as a server's
// closing would.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Kafka starts a kfake cluster of this test listening on ServiceIP (so
// the hosts and the test reach it at the same addresses) and returns its
// seeds. Kafka clients dial the addresses the brokers advertise, so it
// cannot be forwarded like the others.
func (n *Network) Kafka() []string {
	n.t.Helper()
	return n.KafkaCluster().ListenAddrs()
}

// KafkaCluster is Kafka, returning the cluster itself (for its fault
// injection: Cluster.Control).
func (n *Network) KafkaCluster() *kfake.Cluster {
	n.t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(3),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, ServiceIP+":0") }),
	)
	if err != nil {
		n.t.Fatalf("testenv: start kfake on %s: %v", ServiceIP, err)
	}
	n.t.Cleanup(c.Close)
	return c
}

func run(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	var ee *exec.ExitError
	if errors.As(err, &ee) && s == "" {
		s = ee.String()
	}
	return s, err
}
