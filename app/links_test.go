//go:build linux

package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/dialer"
	"github.com/causet/projection-retry/internal/testenv"
)

// localPort is the local TCP port of a pgx connection.
func localPort(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	addr, ok := c.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	require.True(t, ok, "a TCP connection")
	return addr.Port
}

// A LISTEN connection waits for notifications with no deadline of its own
// (the projection catalog's does). On a link that drops its packets without
// a word, a connection from OpenPool fails within the link timeout; one
// dialed as pgx does by default is still waiting long after.
func TestPoolConnectionFailsOnASilentLink(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const link = 3 * time.Second
	pool, err := app.OpenPool(ctx, url, link)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ours, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer ours.Release()
	plain, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	for _, c := range []*pgx.Conn{ours.Conn(), plain} {
		_, err := c.Exec(ctx, "LISTEN causet_silent_link")
		require.NoError(t, err)
	}

	wait := func(c *pgx.Conn) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.WaitForNotification(context.Background())
			done <- err
		}()
		return done
	}
	testenv.SilenceLink(t, localPort(t, ours.Conn()))
	healPlain := testenv.SilenceLink(t, localPort(t, plain))
	oursDone, plainDone := wait(ours.Conn()), wait(plain)
	start := time.Now()
	select {
	case err := <-oursDone:
		require.Error(t, err, "the silent link is reported")
		t.Logf("OpenPool's connection failed %s after the link went silent: %v", time.Since(start).Round(100*time.Millisecond), err)
	case <-time.After(60 * time.Second):
		t.Fatalf("OpenPool's connection still waits %s after the link went silent (link timeout %s)", time.Since(start).Round(time.Second), link)
	}
	select {
	case err := <-plainDone:
		t.Fatalf("the default dialer's connection also returned (%v): the test shows nothing", err)
	case <-time.After(10 * time.Second):
	}
	healPlain()
	// Closing the socket under the blocked wait ends it.
	_ = plain.PgConn().Conn().Close()
	<-plainDone
}

// Sessions run with DefaultStatementTimeout unless DATABASE_URL sets one; a
// statement stuck behind a lock fails at it instead of holding its caller.
func TestPoolStatementTimeout(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := app.OpenPool(ctx, url, 0)
	require.NoError(t, err)
	defer pool.Close()
	var got string
	require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
	require.Equal(t, "1min", got)

	short, err := app.OpenPool(ctx, url+sepFor(url)+"statement_timeout=500ms", 0)
	require.NoError(t, err)
	defer short.Close()
	require.NoError(t, short.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
	require.Equal(t, "500ms", got)

	_, err = pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS causet_statement_timeout_probe (id int)")
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "LOCK TABLE causet_statement_timeout_probe IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	start := time.Now()
	_, err = short.Exec(ctx, "SELECT count(*) FROM causet_statement_timeout_probe")
	require.ErrorContains(t, err, "canceling statement due to statement timeout")
	require.Less(t, time.Since(start), 30*time.Second, "failed at the timeout, not at the test's deadline")
}

// The bridge's database probe answers on a saturated pool (its connection
// is its own) and fails within its context when PostgreSQL cannot be
// reached.
func TestProbePostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := app.OpenPool(ctx, url+sepFor(url)+"pool_max_conns=1", 0)
	require.NoError(t, err)
	defer pool.Close()
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	require.NoError(t, app.ProbePostgres(pool)(pctx), "a full pool is no outage")

	gone, err := app.OpenPool(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", 0)
	require.NoError(t, err, "the pool connects lazily")
	defer gone.Close()
	pctx2, pcancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel2()
	require.Error(t, app.ProbePostgres(gone)(pctx2))
}

func sepFor(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

// connHook collects the connections a Kafka client opens.
type connHook struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (h *connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, c net.Conn, err error) {
	if err == nil {
		h.mu.Lock()
		h.conns = append(h.conns, c)
		h.mu.Unlock()
	}
}

// Every Kafka client of a process dials through KafkaConnOpts: its
// connections carry the link timeout.
func TestKafkaConnectionsCarryTheLinkTimeout(t *testing.T) {
	seeds := testenv.Kafka(t)
	opts, err := app.KafkaConnOpts(config.KafkaSecurity{}, 4*time.Second)
	require.NoError(t, err)
	hook := &connHook{}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(seeds...), kgo.WithHooks(hook))...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.Ping(ctx))
	hook.mu.Lock()
	defer hook.mu.Unlock()
	require.NotEmpty(t, hook.conns)
	for _, c := range hook.conns {
		raw, err := c.(syscall.Conn).SyscallConn()
		require.NoError(t, err)
		var ms int
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }))
		require.NoError(t, gerr)
		require.Equal(t, 4000, ms, "TCP_USER_TIMEOUT of %s", c.RemoteAddr())
	}
}

// A Temporal client from DialTemporal whose connection goes silent gets a
// working one back within about the link timeout: its calls fail on the
// dead connection, which is closed, and a new one is dialed. Without the
// dialer and keepalive settings the dead connection lived 15.6 s here.
func TestTemporalClientLeavesASilentConnection(t *testing.T) {
	srv := testenv.Temporal(t)
	addr, accepted := testenv.Forward(t, srv.HostPort)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const link = 3 * time.Second
	tc, err := app.DialTemporal(ctx, quietLogger(), app.TemporalOptions{HostPort: addr, LinkTimeout: link})
	require.NoError(t, err)
	defer tc.Close()
	first := <-accepted
	testenv.SilenceLink(t, first)
	start := time.Now()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		err := tc.Probe(cctx)
		ccancel()
		if err == nil {
			select {
			case port := <-accepted:
				t.Logf("a new connection (port %d) answers %s after the first went silent", port, time.Since(start).Round(100*time.Millisecond))
				return
			default:
				t.Fatal("a call answered over the silent connection")
			}
		}
		require.Less(t, time.Since(start), link+5*time.Second, "the client still waits on the silent connection: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A PostgreSQL that never answers the handshake (its packets dropped) fails
// the connection attempt within dialer.ConnectTimeout, not after the
// kernel's SYN retries (about two minutes).
func TestPoolConnectFailsOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	testenv.SilenceLink(t, port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := app.OpenPool(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), 0)
	require.NoError(t, err, "the pool connects lazily")
	defer pool.Close()
	start := time.Now()
	require.Error(t, pool.Ping(ctx))
	require.Less(t, time.Since(start), dialer.ConnectTimeout+5*time.Second, "failed at the connect timeout, not at the test's deadline")
}

// An idle pooled connection whose link went silent is pinged within
// PoolPingTimeout as it is taken, then replaced: the caller gets a working
// connection long before the link timeout (30 s here) would close it.
func TestPoolReplacesASilentIdleConnection(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := app.OpenPool(ctx, url+sepFor(url)+"pool_max_conns=2", 30*time.Second)
	require.NoError(t, err)
	defer pool.Close()
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	port := localPort(t, c.Conn())
	c.Release()
	time.Sleep(1500 * time.Millisecond) // idle long enough to be pinged when taken
	heal := testenv.SilenceLink(t, port)
	defer heal() // before the pool closes its connections
	start := time.Now()
	c, err = pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	require.NotEqual(t, port, localPort(t, c.Conn()), "a new connection")
	require.Less(t, time.Since(start), app.PoolPingTimeout+5*time.Second, "replaced at the ping timeout, not the link timeout")
}

// A Temporal client whose connection crosses a peer that stops answering
// (a hung proxy or load balancer: everything acknowledged, nothing answered,
// so no TCP timeout fires) answers again soon after the peer serves new
// connections: gRPC's keepalive ping ends the silent connection, and the
// client dials a new one. The bridge's starts and the worker's polls ride
// on this client.
func TestTemporalClientLeavesAHungPeer(t *testing.T) {
	srv := testenv.Temporal(t)
	peer := testenv.NewHungPeer(t, srv.HostPort)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tc, err := app.DialTemporal(ctx, quietLogger(), app.TemporalOptions{HostPort: peer.Addr, LinkTimeout: dialer.DefaultLinkTimeout})
	require.NoError(t, err)
	defer tc.Close()
	probe := func() error {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		return tc.Probe(cctx)
	}
	require.NoError(t, probe())

	peer.Hang()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		require.Error(t, probe(), "a call answered while the peer was hung")
	}
	peer.Answer()
	answered := time.Now()
	for probe() != nil {
		require.Less(t, time.Since(answered), 30*time.Second, "the client still waits on the hung peer 30 s after it answers new connections")
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("answers %s after the peer serves new connections again", time.Since(answered).Round(100*time.Millisecond))
}

// advertised is a listener that reports another address, so that a kfake
// broker advertises the hung peer in front of it.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (l advertised) Addr() net.Addr { return l.addr }

// A Kafka client whose connection crosses a peer that stops answering gets
// its produce through soon after the peer serves new connections: the
// request's own deadline ends the silent connection, and the client retries
// on a new one. The bridge's dead letters and the relay's batches are such
// produces, waited for without a deadline of their own.
func TestKafkaProduceLeavesAHungPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	peer := testenv.NewHungPeer(t, ln.Addr().String())
	peerAddr, err := net.ResolveTCPAddr("tcp", peer.Addr)
	require.NoError(t, err)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1),
		kfake.ListenFn(func(string, string) (net.Listener, error) { return advertised{ln, peerAddr}, nil }))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	require.Equal(t, []string{peer.Addr}, brokers, "the broker advertises the peer")
	opts, err := app.KafkaConnOpts(config.KafkaSecurity{}, dialer.DefaultLinkTimeout)
	require.NoError(t, err)
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("hung"), kgo.AllowAutoTopicCreation())...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr())

	peer.Hang()
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("during")}).FirstErr() }()
	select {
	case err := <-done:
		t.Fatalf("a produce answered while the peer was hung: %v", err)
	case <-time.After(20 * time.Second):
	}
	peer.Answer()
	answered := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err)
		t.Logf("produced %s after the peer serves new connections again", time.Since(answered).Round(100*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the produce still waits on the hung peer 30 s after it answers new connections")
	}
}
