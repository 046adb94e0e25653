package starter

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StallAfter is how long a partition with work may go without progress
// before Stalled reports it and /healthz fails. Every wait of a partition
// is bounded well within it — a database try by DatabaseTryTimeout, a
// Temporal call by StartTimeout, a wait on an outage by its backoff — so a
// partition past it is stuck in a call nothing ends, and only a restart
// frees it.
const StallAfter = 5 * time.Minute

// progress is how far a partition's work has come: busySince is when it
// took up the work it is on (0: idle, waiting for records), lastBeat when
// it last made progress (a try returned, a backoff ended, a batch
// finished); both unix nanoseconds.
type progress struct {
	busySince, lastBeat atomic.Int64
}

// beat records progress.
func (p *progress) beat() { p.lastBeat.Store(time.Now().UnixNano()) }

// busy records that the partition took up work.
func (p *progress) busy() {
	now := time.Now().UnixNano()
	p.busySince.CompareAndSwap(0, now)
	p.lastBeat.Store(now)
}

// idle records that the partition has no work.
func (p *progress) idle() { p.busySince.Store(0) }

// stalledFor is how long the partition has had work and made no progress;
// 0 when idle.
func (p *progress) stalledFor(now time.Time) time.Duration {
	if p.busySince.Load() == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, p.lastBeat.Load()))
}

// Stalled reports a partition that has had work and made no progress for
// after (StallAfter in production): the bridge's liveness check.
func (b *Bridge) Stalled(after time.Duration) error {
	now := time.Now()
	for _, p := range b.owned() {
		if d := p.stalledFor(now); d >= after {
			return fmt.Errorf("partition %d of %s has made no progress for %s while it has work (more than %s): it waits on a call that never returns",
				p.id, p.topic, d.Round(time.Second), after)
		}
	}
	return nil
}

// longestStall is the longest time a partition with work has gone without
// progress, in seconds (causet_bridge_partition_stalled_seconds).
func (b *Bridge) longestStall() float64 {
	now := time.Now()
	var longest time.Duration
	for _, p := range b.owned() {
		longest = max(longest, p.stalledFor(now))
	}
	return longest.Seconds()
}

func (b *Bridge) registerStallGauge(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "causet", Subsystem: "bridge", Name: "partition_stalled_seconds",
		Help: "The longest time a partition with work has gone without progress (0 while every partition moves or is idle); past 300 the bridge's /healthz fails."},
		b.longestStall))
}
