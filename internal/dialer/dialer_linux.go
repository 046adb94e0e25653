package dialer

import (
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout sets TCP_USER_TIMEOUT on a TCP socket before it connects
// (PostgreSQL may also be reached over a Unix socket).
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
