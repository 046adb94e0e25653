//go:build !linux

package dialer

import (
	"syscall"
	"time"
)

// userTimeout is Linux only; elsewhere keepalive alone bounds an idle dead
// link, and the callers' own deadlines a busy one.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
