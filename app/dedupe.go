package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causet/projection-retry/projection"
)

// DedupeMaintainEvery is how often a worker or bridge maintains the dedupe
// ledger (projection.MaintainDedupe). Hour partitions exist DedupeAhead
// (48 h) ahead, so a process may be down that long before new hours fall
// back to bucket 0.
const DedupeMaintainEvery = 10 * time.Minute

// dedupeMetrics are the dedupe ledger's gauges and counters.
type dedupeMetrics struct {
	bytes, oldest, partitions, unbucketed prometheus.Gauge
	dropped, pruned, failures             prometheus.Counter
}

func newDedupeMetrics(reg prometheus.Registerer) *dedupeMetrics {
	m := &dedupeMetrics{
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "causet_dedupe_ledger_bytes",
			Help: "Size of the dedupe ledger (tables and indexes of every partition), as of the last maintenance."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "causet_dedupe_ledger_oldest_timestamp_seconds",
			Help: "Unix time of the oldest entry the dedupe ledger may hold (its oldest hour partition or bucket-0 row)."}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "causet_dedupe_ledger_partitions",
			Help: "Hour partitions of the dedupe ledger."}),
		unbucketed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "causet_dedupe_ledger_unbucketed_rows",
			Help: "Estimated rows in the dedupe ledger's bucket 0 (events without occurredAt or outside the window)."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "causet_dedupe_ledger_partitions_dropped_total",
			Help: "Hour partitions of the dedupe ledger dropped past the horizon by this process."}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{Name: "causet_dedupe_ledger_rows_pruned_total",
			Help: "Bucket-0 rows of the dedupe ledger deleted past the horizon by this process."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "causet_dedupe_ledger_maintenance_failures_total",
			Help: "Dedupe ledger maintenance runs that failed."}),
	}
	reg.MustRegister(m.bytes, m.oldest, m.partitions, m.unbucketed, m.dropped, m.pruned, m.failures)
	return m
}

// startDedupeMaintenance maintains the dedupe ledger at once and then every
// DedupeMaintainEvery until Close, in the background: creating a fresh
// ledger's hours takes a moment, and until then events are recorded in
// bucket 0, which is as exact. Concurrent processes take turns (the
// maintenance holds an advisory lock).
func (s *Service) startDedupeMaintenance() {
	m := newDedupeMetrics(s.Registry)
	run := func(ctx context.Context) error {
		dropped, pruned, err := projection.MaintainDedupe(ctx, s.Pool, s.Config.DedupeHorizon)
		if err != nil {
			m.failures.Inc()
			return err
		}
		m.dropped.Add(float64(dropped))
		m.pruned.Add(float64(pruned))
		st, err := projection.ReadDedupeStats(ctx, s.Pool)
		if err != nil {
			m.failures.Inc()
			return err
		}
		m.bytes.Set(float64(st.Bytes))
		m.partitions.Set(float64(st.Partitions))
		m.unbucketed.Set(float64(st.UnbucketedRows))
		if o := st.Oldest(); !o.IsZero() {
			m.oldest.Set(float64(o.Unix()))
		}
		level := s.Logger.Debug
		if dropped > 0 || pruned > 0 {
			level = s.Logger.Info
		}
		level("projection_dedupe_maintained", "partitionsDropped", dropped, "rowsPruned", pruned,
			"ledgerBytes", st.Bytes, "partitions", st.Partitions, "horizon", s.Config.DedupeHorizon.String())
		return nil
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(DedupeMaintainEvery)
		defer t.Stop()
		for {
			if err := run(lctx); err != nil && lctx.Err() == nil {
				// Nothing is at risk until DedupeAhead passes: the next run
				// tries again.
				s.Logger.Warn("projection_dedupe_maintenance_failed", "error", err.Error())
			}
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	s.closers = append(s.closers, func() { cancel(); <-done })
}
