// Package dialer builds the net.Dialer of every connection a causet process
// opens to PostgreSQL, Kafka and Temporal, so that a link that goes silent
// (packets dropped without a reset: a firewall change, a hung node, a
// network partition) fails its connection within a bound instead of the
// kernel's ~15 minutes of retransmissions (tcp_retries2).
//
// Two mechanisms, both per connection: TCP keepalive probes an idle
// connection every Interval after Idle, and TCP_USER_TIMEOUT (Linux) closes a
// connection whose sent data, keepalive probes included, stays
// unacknowledged for the link timeout. Busy or idle, a dead link errors
// within about the link timeout plus one probe interval; the caller's
// outage handling (a probe-proven wait) takes it from there.
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
