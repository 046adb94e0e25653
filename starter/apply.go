package starter

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/projection"
)

// countOutcomes counts a batch's outcomes in the metrics, and the events no
// projection listed in the apply as skipped, and returns, in order, the
// outcomes that still need a hand-off: failed and held pairs.
func (p *partition) countOutcomes(items []item, outcomes []projection.Result) []projection.Result {
	m := p.b.m
	matched := make([]bool, len(items))
	unmatched := len(items)
	var rest []projection.Result
	for _, o := range outcomes {
		if !matched[o.Index] {
			matched[o.Index] = true
			unmatched--
		}
		switch o.Status {
		case projection.StatusApplied, projection.StatusDuplicate:
			m.applied.WithLabelValues(string(o.Status)).Inc()
		case projection.StatusFailed:
			m.failed.WithLabelValues(kindOf(o)).Inc()
			rest = append(rest, o)
		case projection.StatusHeld:
			m.heldInline.Inc()
			rest = append(rest, o)
		}
	}
	m.skipped.Add(float64(unmatched))
	return rest
}

// catalogRefresher is an Engine that can reload its catalog cache now.
type catalogRefresher interface {
	Refresh(ctx context.Context) error
}

// refreshCatalog brings the engine's catalog cache up to the database's,
// retrying while the database is unreachable (workflow mode decides skips
// from it). False when the partition stopped first.
func (p *partition) refreshCatalog() bool {
	r, ok := p.b.opts.Engine.(catalogRefresher)
	if !ok {
		return true
	}
	return p.until(p.log, "database", "cannot read the projection catalog", r.Refresh)
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
	first := contract.FirstAttempt(time.Now().UTC(), string(contract.KindSQL), cause, 0)
	if len(it.projections) == 0 {
		// The cache lists no projection for it, so no retry workflow can be
		// named: it can never be applied here, dead-letter it now.
		r := dlq.RunRecord(contract.DeadLetterInput{Event: it.env, Key: it.rec.Key, Source: sourceOf(it.rec),
			Attempts: []contract.Attempt{*first}}, first.StartedAt)
		return p.publishDeadLetter(p.recordLog(it.rec), "event", it.rec.Key, r)
	}
	for _, proj := range it.projections {
		p.b.m.failed.WithLabelValues(first.ErrorKind).Inc()
		p.recordLog(it.rec).Warn("event fails its batch as a whole while the database answers: handed to its retry workflow",
			"projectionName", proj, "eventId", it.env.EventID, "error", errString(cause))
		if !p.handOff(seg, it.rec, p.retryInput(it, proj, first)) {
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
func (p *partition) applyThroughOutage(items []item, last *kgo.Record, apply func() ([]projection.Result, error)) ([]projection.Result, applyResult) {
	span := p.startBatchSpan(items, last)
	defer span.End()
	r := p.retrier(p.log, p.database())
	for {
		outcomes, err := apply()
		if p.ctx.Err() != nil {
			return nil, applyResult{verdict: verdictStopped}
		}
		if !isOutage(outcomes, err) {
			if !r.outage.IsZero() {
				p.log.Info("database reachable again: batch applied, partition resumed",
					"event", "bridge_outage_over", "dependency", "database",
					"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "pausedFor", r.pausedFor())
			}
			return outcomes, applyResult{}
		}
		if err == nil {
			err = firstConnectionError(outcomes)
		}
		if r.failed("database unreachable: partition paused, retrying the batch with backoff", err,
			"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset, "events", len(items)) {
			if r.healthy >= maxHealthyRetries {
				return nil, applyResult{verdict: verdictIsolate, err: err}
			}
			p.log.Debug("batch failed as a whole but the database answers: retrying it", "try", r.healthy, "error", errString(err))
		}
		if !r.wait() {
			return nil, applyResult{verdict: verdictStopped}
		}
	}
}

// errOutage stands for a batch whose every failure was a lost connection.
var errOutage = errors.New("database unreachable")

func firstConnectionError(outcomes []projection.Result) error {
	for _, o := range outcomes {
		if o.Status == projection.StatusFailed && kindOf(o) == string(contract.KindConnection) && o.Err != nil {
			return o.Err
		}
	}
	return errOutage
}
