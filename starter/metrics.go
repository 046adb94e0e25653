package starter

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the bridge's Prometheus series (namespace causet_bridge).
type metrics struct {
	consumed     prometheus.Counter
	applied      *prometheus.CounterVec // label result: applied|duplicate
	skipped      prometheus.Counter
	failed       *prometheus.CounterVec // label error_kind
	handedOff    *prometheus.CounterVec // label mode
	handoffRetry prometheus.Counter
	deadLettered *prometheus.CounterVec
	outages      *prometheus.CounterVec // label dependency: database|temporal|kafka
	inflight     prometheus.Gauge
	lag          *prometheus.GaugeVec   // label partition
	committed    *prometheus.GaugeVec   // label partition
	laneHandoffs *prometheus.CounterVec // label role: head|held
	laneRefused  prometheus.Counter
	laneFull     prometheus.Counter
	lanesLost    prometheus.Counter
	unblocked    *prometheus.CounterVec // label via: refusal|lane_closed
	blockedKeys  prometheus.Gauge
	heldInline   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "causet", "bridge"
	m := &metrics{
		consumed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "records_consumed_total", Help: "Records read from the events topic."}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "applied_total", Help: "(projection, event) pairs applied inline as attempt 1 (result=applied) or found already applied (result=duplicate)."}, []string{"result"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "skipped_total", Help: "Events whose type no projection lists."}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "inline_failures_total", Help: "(projection, event) pairs whose inline attempt 1 failed, by error kind."}, []string{"error_kind"}),
		handedOff: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "handed_off_total", Help: "Retry workflows started (or found existing) for (projection, event) pairs."}, []string{"mode"}),
		handoffRetry: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "handoff_retries_total", Help: "Workflow start calls that failed and are retried with backoff."}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dead_lettered_total", Help: "Dead letters the bridge wrote to the DLQ topic itself (records that are not envelopes, starts Temporal refused, events an incident dead-lettered), by projection (empty for records that are not envelopes) and error kind."}, []string{"projection", "error_kind"}),
		outages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outage_pauses_total", Help: "Times a partition paused because a dependency was unreachable."}, []string{"dependency"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "handoffs_inflight", Help: "Workflow starts in flight."}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "partition_lag", Help: "High watermark minus the next offset to fetch, per partition, at the last fetch."}, []string{"topic", "partition"}),
		committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "committed_offset", Help: "Last committed offset per partition."}, []string{"topic", "partition"}),
		laneHandoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lane_handoffs_total", Help: "Events of blocked keys handed off: the failure that blocked its key, started as a retry workflow of its own (role=head), or a later event of a blocked key added to its lane (role=held)."}, []string{"role"}),
		laneRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lane_refusals_total", Help: "Lane enqueue updates refused because the lane was closing."}),
		laneFull: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lane_full_total", Help: "Lane enqueue updates refused because the lane held its bound (CAUSET_LANE_MAX_QUEUED or its byte budget); the event waits in the bridge."}),
		lanesLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lanes_lost_total", Help: "Lanes found closed without completing (terminated, failed, timed out, canceled): their unstarted events are sent again, or the key stays blocked. Alert on any increase."}),
		unblocked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "keys_unblocked_total", Help: "Blocked keys cleared, after a lane refusal (via=refusal) or once the key's lane completed (via=lane_closed)."}, []string{"via"}),
		blockedKeys: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "blocked_keys", Help: "(projection, fork, entity) keys currently blocked in owned partitions."}),
		heldInline: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "held_total", Help: "(projection, event) pairs held back from inline apply because their key was blocked."}),
	}
	if reg != nil {
		reg.MustRegister(m.laneHandoffs, m.laneRefused, m.laneFull, m.lanesLost, m.unblocked, m.blockedKeys, m.heldInline)
		reg.MustRegister(m.consumed, m.applied, m.skipped, m.failed, m.handedOff, m.handoffRetry,
			m.deadLettered, m.outages, m.inflight, m.lag, m.committed)
	}
	return m
}
