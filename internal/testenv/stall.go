package testenv

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HungPeer is a TCP proxy that can stop answering the way a hung pooler,
// database proxy or load balancer does: the connections it holds stay open
// and everything sent on them is acknowledged (it reads and drops it), but
// nothing comes back, so neither TCP keepalive nor TCP_USER_TIMEOUT ever
// fires on the client's side.
type HungPeer struct {
	// Addr is the proxy's address (host:port on loopback).
	Addr string

	target string
	mu     sync.Mutex
	hung   bool
	links  []*hungLink
	all    []net.Conn
}

// hungLink is one client connection and its upstream; once silenced it
// answers nothing again.
type hungLink struct {
	mu     sync.Mutex
	silent bool
	client net.Conn
}

// NewHungPeer serves target (host:port) through a proxy of its own until
// the test ends.
func NewHungPeer(t testing.TB, target string) *HungPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: hung peer for %s: %v", target, err)
	}
	p := &HungPeer{Addr: ln.Addr().String(), target: target}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.all {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

// Hang silences every connection the proxy holds, for good, and every one
// it accepts until Answer.
func (p *HungPeer) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hung = true
	for _, l := range p.links {
		l.mu.Lock()
		l.silent = true
		l.mu.Unlock()
	}
}

// Answer serves new connections again; those silenced stay silent, as a
// peer's lost flows do.
func (p *HungPeer) Answer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hung = false
}

func (p *HungPeer) serve(c net.Conn) {
	l := &hungLink{client: c}
	p.mu.Lock()
	p.all = append(p.all, c)
	l.silent = p.hung
	p.links = append(p.links, l)
	p.mu.Unlock()
	if l.silent {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.all = append(p.all, up)
	p.mu.Unlock()
	go l.copy(up, c)
	l.copy(c, up)
}

// copy copies src to dst until either ends or the link is silenced; a
// silenced link goes on reading src (so its sender is acknowledged) and
// writes nothing.
func (l *hungLink) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.mu.Lock()
			silent := l.silent
			l.mu.Unlock()
			if !silent {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			l.mu.Lock()
			silent := l.silent
			l.mu.Unlock()
			if !silent {
				dst.Close()
				src.Close()
			}
			return
		}
	}
}

// PoolBehindHungPeer opens a pool on db's database through a HungPeer of its
// own, as a service behind a pooler or proxy reaches it: connections are
// established within 2 s and an idle one is pinged, when acquired, within
// ping. Both are closed when the test ends.
func PoolBehindHungPeer(t testing.TB, ctx context.Context, db *pgxpool.Pool, ping time.Duration) (*pgxpool.Pool, *HungPeer) {
	t.Helper()
	cfg := db.Config().Copy()
	peer := NewHungPeer(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(peer.Addr)
	if err != nil {
		t.Fatalf("testenv: hung peer address %q: %v", peer.Addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("testenv: hung peer port %q: %v", port, err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.PingTimeout = ping
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: pool behind the hung peer: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, peer
}

// advertisedListener is a broker's listener that gives clients another
// address (the hung peer's) to connect to.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// KafkaBehindHungPeer starts a single-broker kfake cluster that every
// client reaches through a HungPeer (the broker advertises the peer's
// address), closed when the test ends; its seeds are ListenAddrs(). Skips
// when KAFKA_BROKERS is set: a real broker advertises its own address.
func KafkaBehindHungPeer(t testing.TB) (*kfake.Cluster, *HungPeer) {
	t.Helper()
	if IsRealKafka() {
		t.Skip("testenv: KafkaBehindHungPeer needs the in-process kfake cluster (a real broker advertises its own address); KAFKA_BROKERS is set")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: kafka behind a hung peer: %v", err)
	}
	peer := NewHungPeer(t, ln.Addr().String())
	peerAddr, err := net.ResolveTCPAddr("tcp", peer.Addr)
	if err != nil {
		t.Fatalf("testenv: kafka behind a hung peer: %v", err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3),
		kfake.ListenFn(func(string, string) (net.Listener, error) { return advertisedListener{ln, peerAddr}, nil }))
	if err != nil {
		t.Fatalf("testenv: start kfake cluster behind a hung peer: %v", err)
	}
	t.Cleanup(c.Close)
	return c, peer
}

// Bypass is a franz-go option for a client that reaches the peer's target
// directly, as a client the peer does not stand in front of (a producer
// elsewhere) does.
func (p *HungPeer) Bypass() kgo.Opt {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		if host == p.Addr {
			host = p.target
		}
		return d.DialContext(ctx, network, host)
	})
}
