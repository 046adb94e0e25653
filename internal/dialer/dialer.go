package dialer

import (
	"net"
	"time"
)

// Bounds of CAUSET_LINK_TIMEOUT.
const (
	DefaultLinkTimeout = 10 * time.Second
	MinLinkTimeout     = 2 * time.Second
	MaxLinkTimeout     = 5 * time.Minute
	// ConnectTimeout bounds establishing a connection (for PostgreSQL,
	// its handshake and authentication too): a peer that answers takes
	// milliseconds; one behind a silent link never does.
	ConnectTimeout = 5 * time.Second
)

// New returns a dialer whose connections are closed once the link has been
// silent for linkTimeout (DefaultLinkTimeout when zero or less).
func New(linkTimeout time.Duration) *net.Dialer {
	if linkTimeout <= 0 {
		linkTimeout = DefaultLinkTimeout
	}
	probe := max(linkTimeout/3, time.Second)
	return &net.Dialer{
		Timeout: ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     probe,
			Interval: probe,
			Count:    3,
		},
		Control: userTimeout(linkTimeout),
	}
}
