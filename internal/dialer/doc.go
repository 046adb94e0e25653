// Package dialer builds the net.Dialer of every connection a causet process
// opens to PostgreSQL, Kafka and Temporal, so that a link that goes silent
// (packets dropped without a reset: a firewall change, a hung node, a
// network partition) fails its connection within a bound instead of the
// kernel's ~15 minutes of retransmissions (tcp_retries2).
//
// Two mechanisms, both per connection: TCP keepalive probes an idle
// connection every Interval after Idle, and TCP_USER_TIMEOUT (Linux,
// dialer_linux.go; elsewhere keepalive alone) closes a connection whose sent
// data, keepalive probes included, stays unacknowledged for the link
// timeout (CAUSET_LINK_TIMEOUT). Busy or idle, a dead link errors within
// about the link timeout plus one probe interval; the caller's outage
// handling (a probe-proven wait) takes it from there.
//
// Neighbours: a leaf. Package app hands New's dialer to pgx, franz-go and
// gRPC; package config reads CAUSET_LINK_TIMEOUT within its bounds
// (MinLinkTimeout, MaxLinkTimeout). It imports no project package.
package dialer
