package dialer

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var v int
	var gerr error
	require.NoError(t, raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) }))
	require.NoError(t, gerr)
	return v
}

func TestTCPConnectionsCarryTheLinkTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	for _, tc := range []struct {
		link    time.Duration
		timeout int
		idle    int
	}{{0, 10_000, 4}, {6 * time.Second, 6_000, 2}, {2 * time.Second, 2_000, 1}} {
		c, err := New(tc.link).DialContext(context.Background(), "tcp", ln.Addr().String())
		require.NoError(t, err)
		require.Equal(t, tc.timeout, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT), "TCP_USER_TIMEOUT of link %s", tc.link)
		require.Equal(t, 1, sockopt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE))
		require.Equal(t, tc.idle, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE), "seconds before the first probe (rounded up)")
		require.Equal(t, 3, sockopt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPCNT))
		c.Close()
	}
}

// PostgreSQL may be reached over a Unix socket, which has no TCP options.
func TestUnixSocketsDialAsUsual(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer ln.Close()
	c, err := New(0).DialContext(context.Background(), "unix", path)
	require.NoError(t, err)
	c.Close()
}
