package starter

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
)

// applyInline runs attempt 1 of every matched pair in one transaction and
// hands each failure to Temporal. A batch that cannot be attempted because
// the database is unreachable is retried with backoff: nothing is handed
// off or dead-lettered because of an outage. A batch that fails as a whole
// while the database answers is split (isolate).
func (p *partition) applyInline(seg *segment, items []item, last *kgo.Record) bool {
	b := p.b
	evs := make([]event.Envelope, len(items))
	for i, it := range items {
		evs[i] = it.env
	}
	var startedAt time.Time
	outcomes, res := p.applyThroughOutage(items, last, func() ([]Outcome, error) {
		startedAt = time.Now().UTC()
		return b.opts.Engine.ApplyBatch(p.ctx, evs)
	})
	switch res.verdict {
	case verdictStopped:
		return false
	case verdictIsolate:
		return p.isolate(seg, items, res.err, p.applyInline)
	}

	p.countSkipped(items, outcomes)
	for _, o := range outcomes {
		switch o.Status {
		case StatusApplied, StatusDuplicate:
			b.m.applied.WithLabelValues(string(o.Status)).Inc()
		case StatusFailed:
			b.m.failed.WithLabelValues(o.ErrorKind).Inc()
			it := items[o.Index]
			if !p.handOff(seg, it.rec, p.retryInput(it, o.Projection, firstAttempt(startedAt, o))) {
				return false
			}
		}
	}
	return true
}

// countSkipped counts the events no projection listed in the apply.
func (p *partition) countSkipped(items []item, outcomes []Outcome) {
	matched := make([]bool, len(items))
	n := len(items)
	for _, o := range outcomes {
		if !matched[o.Index] {
			matched[o.Index] = true
			n--
		}
	}
	p.b.m.skipped.Add(float64(n))
}

// catalogRefresher is an Engine that can reload its catalog cache now.
type catalogRefresher interface {
	Refresh(ctx context.Context) error
}

// refreshCatalog brings the engine's catalog cache up to the database's,
// retrying while the database is unreachable (workflow mode decides skips
// from it).
func (p *partition) refreshCatalog() {
	r, ok := p.b.opts.Engine.(catalogRefresher)
	if !ok {
		return
	}
	bo := newBackoff(p.b.opts.MinBackoff, p.b.opts.MaxBackoff)
	for {
		err := r.Refresh(p.ctx)
		if err == nil || p.ctx.Err() != nil {
			return
		}
		p.log.Warn("cannot read the projection catalog, retrying with backoff", "dependency", "database", "error", err.Error())
		if bo.wait(p.ctx) != nil {
			return
		}
	}
}

// firstAttempt is the record of a failed inline attempt 1.
func firstAttempt(startedAt time.Time, o Outcome) *workflows.Attempt {
	return &workflows.Attempt{Number: 1, StartedAt: startedAt, ErrorKind: o.ErrorKind, Error: errString(o.Err), IRVersion: o.IRVersion}
}

// isolate handles a batch that failed as a whole while the database
// answered its probe: something in the batch, not the database, is at
// fault. The halves are applied in order, each on its own, down to single
// events; a single event that still fails as a whole has failed attempt 1
// (errorKind sql) and is handed off like any failure, without blocking its
// key: its failure could not be written with the block.
func (p *partition) isolate(seg *segment, items []item, cause error, apply func(*segment, []item, *kgo.Record) bool) bool {
	if len(items) > 1 {
		h := len(items) / 2
		p.log.Debug("batch failed as a whole while the database answers: applying its halves apart",
			"firstOffset", items[0].rec.Offset, "lastOffset", items[len(items)-1].rec.Offset, "error", errString(cause))
		return apply(seg, items[:h], items[h-1].rec) && apply(seg, items[h:], items[len(items)-1].rec)
	}
	it := items[0]
	startedAt := time.Now().UTC()
	if len(it.projections) == 0 {
		// The cache lists no projection for it, so no retry workflow can be
		// named: it can never be applied here, dead-letter it now.
		r := activities.BuildRecord(workflows.DeadLetterInput{Event: it.env, Key: it.rec.Key, Source: sourceOf(it.rec),
			Attempts: []workflows.Attempt{{Number: 1, StartedAt: startedAt, ErrorKind: string(projection.KindSQL), Error: errString(cause)}}}, startedAt)
		return p.publishDeadLetter(p.recordLog(it.rec), "event", it.rec.Key, r)
	}
	for _, proj := range it.projections {
		o := Outcome{Projection: proj, Status: StatusFailed, ErrorKind: string(projection.KindSQL), Err: cause}
		p.b.m.failed.WithLabelValues(o.ErrorKind).Inc()
		p.recordLog(it.rec).Warn("event fails its batch as a whole while the database answers: handed to its retry workflow",
			"projectionName", proj, "eventId", it.env.EventID, "error", errString(cause))
		if !p.handOff(seg, it.rec, p.retryInput(it, proj, firstAttempt(startedAt, o))) {
			return false
		}
	}
	return true
}

// verdict is what applyThroughOutage concluded about a batch.
type verdict int

const (
	verdictDone    verdict = iota // outcomes are the events' own
	verdictStopped                // the partition stopped first
	verdictIsolate                // the batch fails as a whole while the database answers
)

type applyResult struct {
	verdict verdict
	err     error // the batch's error, with verdictIsolate
}

// maxHealthyRetries bounds the tries of a batch that fails as a whole while
// the database answers its probe (a deadlock or a dropped connection
// resolves on a retry); after them the batch is isolated.
const maxHealthyRetries = 3

// applyThroughOutage runs apply until its result is not a database outage
// (the whole batch failing, or a pair failing with connection), pausing
// the partition with capped backoff meanwhile, so an outage hands nothing
// to Temporal and dead-letters nothing. An outage is proven by the probe:
// while the database answers it, the batch is tried maxHealthyRetries
// times, then isolated.
func (p *partition) applyThroughOutage(items []item, last *kgo.Record, apply func() ([]Outcome, error)) ([]Outcome, applyResult) {
	b := p.b
	bo := newBackoff(b.opts.MinBackoff, b.opts.MaxBackoff)
	var outage time.Time
	healthy := 0
	for {
		outcomes, err := apply()
		if p.ctx.Err() != nil {
			return nil, applyResult{verdict: verdictStopped}
		}
		if !isOutage(outcomes, err) {
			if !outage.IsZero() {
				p.log.Info("database reachable again: batch applied, partition resumed",
					"event", "bridge_outage_over", "dependency", "database",
					"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "pausedFor", time.Since(outage).Round(time.Millisecond).String())
			}
			return outcomes, applyResult{}
		}
		if err == nil {
			err = firstConnectionError(outcomes)
		}
		if p.answers(b.opts.Probe) {
			if healthy++; healthy >= maxHealthyRetries {
				return nil, applyResult{verdict: verdictIsolate, err: err}
			}
			p.log.Debug("batch failed as a whole but the database answers: retrying it", "try", healthy, "error", errString(err))
		} else if outage.IsZero() {
			outage = time.Now()
			b.m.outages.WithLabelValues("database").Inc()
			p.log.Warn("database unreachable: partition paused, retrying the batch with backoff",
				"event", "bridge_outage", "dependency", "database",
				"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "events", len(items), "error", errString(err))
		} else {
			p.log.Debug("database still unreachable", "dependency", "database", "error", errString(err))
		}
		if bo.wait(p.ctx) != nil {
			return nil, applyResult{verdict: verdictStopped}
		}
	}
}

// answers runs a dependency's probe (Options.Probe, TemporalProbe): the
// proof of an outage. Without a probe every failure counts as one.
func (p *partition) answers(probe func(context.Context) error) bool {
	if probe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	return probe(ctx) == nil
}

func firstConnectionError(outcomes []Outcome) error {
	for _, o := range outcomes {
		if o.Status == StatusFailed && o.ErrorKind == ErrorKindConnection && o.Err != nil {
			return o.Err
		}
	}
	return errOutage
}
