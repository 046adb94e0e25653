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
	parkedEvents *prometheus.CounterVec // label result: parked|released|dead_lettered|head
	parkedNow    prometheus.Gauge
	parkedOldest prometheus.Gauge
	parkBound    prometheus.Counter
	fenced       prometheus.Counter
	reclaimed    prometheus.Counter
	unblocked    *prometheus.CounterVec // label via: released|dead_lettered
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
		parkedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "parked_events_total", Help: "(projection, event) pairs of blocked keys: parked behind their key's head (result=parked), released and applied (released), dead-lettered with their incident (dead_lettered), released to fail again and become their key's new head (head), or read again after a restart at or below what their key had taken already, and left alone (redelivered)."}, []string{"result"}),
		parkedNow: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "parked_events", Help: "(projection, event) pairs parked in owned partitions, waiting behind their key's head."}),
		parkedOldest: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "parked_oldest_seconds", Help: "Age of the oldest event parked in an owned partition (0 when none is)."}),
		parkBound: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "park_bound_waits_total", Help: "Times a partition waited before a batch because a key's parked events reached CAUSET_PARKED_MAX_PER_KEY or the partition's CAUSET_PARKED_MAX_PER_PARTITION."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "partitions_fenced_total", Help: "Partitions this bridge stopped writing for because another bridge had claimed them since it took them (CAUSET_ORDERING=entity)."}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "partitions_reclaimed_total", Help: "Fenced partitions this bridge claimed again because the group still assigned them to it: the claim that fenced them came from a bridge that no longer had them (CAUSET_ORDERING=entity)."}),
		unblocked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "keys_unblocked_total", Help: "Blocked keys cleared once their parked events were released (via=released) or dead-lettered with their incident (via=dead_lettered)."}, []string{"via"}),
		blockedKeys: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "blocked_keys", Help: "(projection, fork, entity) keys currently blocked in owned partitions."}),
		heldInline: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "held_total", Help: "(projection, event) pairs held back from inline apply because their key was blocked."}),
	}
	if reg != nil {
		reg.MustRegister(m.parkedEvents, m.parkedNow, m.parkedOldest, m.parkBound, m.fenced, m.reclaimed, m.unblocked, m.blockedKeys, m.heldInline)
		reg.MustRegister(m.consumed, m.applied, m.skipped, m.failed, m.handedOff, m.handoffRetry,
			m.deadLettered, m.outages, m.inflight, m.lag, m.committed)
	}
	return m
}
