package starter

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// router decides what becomes of a partition's decoded events, in offset
// order: applied inline, or handed to Temporal. The partition keeps only
// queue, decode and commit bookkeeping; a router counts its work in the
// batch's segment, so offsets never pass an event it has not finished.
//
// Two implementations: directRouter (CAUSET_ORDERING=none) and
// orderedRouter (CAUSET_ORDERING=entity, ordered.go), which parks a failing
// key's later events behind it and releases them once it settles.
type router interface {
	// open runs once, before the partition's first batch. False when the
	// partition stopped first.
	open() bool
	// route applies or hands off one batch's events. False when the
	// partition stopped first: the batch then stays uncommitted.
	route(seg *segment, items []item, last *kgo.Record) bool
	// wake is ready when the router has work of its own between batches
	// (nil: never); between does it. False when the partition stopped.
	wake() <-chan struct{}
	between() bool
	// close runs when the partition's worker ends.
	close()
}

func newRouter(p *partition) router {
	if p.opts.ordered() {
		return newOrderedRouter(p)
	}
	return directRouter{p}
}

// directRouter applies attempt 1 of every matched pair inline and hands each
// failure to its own retry workflow; in workflow mode it hands every pair
// off.
type directRouter struct{ p *partition }

func (directRouter) open() bool            { return true }
func (directRouter) close()                {}
func (directRouter) wake() <-chan struct{} { return nil }
func (directRouter) between() bool         { return true }

func (r directRouter) route(seg *segment, items []item, last *kgo.Record) bool {
	if r.p.opts.Mode == config.ModeWorkflow {
		return r.handOffAll(seg, items)
	}
	return r.applyInline(seg, items, last)
}

// handOffAll hands every matched pair to its retry workflow, whose attempt
// 1 runs there. The skip is decided here, against the catalog as it is now,
// not a cache a deploy behind.
func (r directRouter) handOffAll(seg *segment, items []item) bool {
	p := r.p
	if !p.refreshCatalog() {
		return false
	}
	for _, it := range items {
		projs := p.opts.Engine.Projections(it.env.EventType)
		if len(projs) == 0 {
			p.m.skipped.Inc()
		}
		for _, proj := range projs {
			if !p.handOff(seg, it.rec, p.retryInput(it, proj, nil)) {
				return false
			}
		}
	}
	return true
}

// applyInline runs attempt 1 of every matched pair in one transaction and
// hands each failure to Temporal. A batch that cannot be attempted because
// the database is unreachable is retried with backoff: nothing is handed
// off or dead-lettered because of an outage. A batch that fails as a whole
// while the database answers is split (isolate).
func (r directRouter) applyInline(seg *segment, items []item, last *kgo.Record) bool {
	p := r.p
	evs := envelopes(items)
	var startedAt time.Time
	outcomes, res := p.applyThroughOutage(items, last, func(ctx context.Context) ([]projection.Result, error) {
		startedAt = time.Now().UTC()
		return p.opts.Engine.ApplyBatch(ctx, evs)
	})
	switch res.verdict {
	case verdictStopped:
		return false
	case verdictIsolate:
		return p.isolate(seg, items, res.err, r.applyInline)
	}
	for _, o := range p.countOutcomes(items, outcomes) {
		it := items[o.Index]
		if o.Status == projection.StatusFailed {
			p.b.noteFailure(o, &it.env)
		}
		if !p.handOff(seg, it.rec, p.retryInput(it, o.Projection, firstAttempt(o, startedAt))) {
			return false
		}
	}
	return true
}

func envelopes(items []item) []event.Envelope {
	evs := make([]event.Envelope, len(items))
	for i, it := range items {
		evs[i] = it.env
	}
	return evs
}

// firstAttempt is the record of the failed inline attempt 1 r.
func firstAttempt(r projection.Result, startedAt time.Time) *contract.Attempt {
	return contract.FirstAttempt(startedAt, kindOf(r), errOf(r), r.IRVersion)
}
