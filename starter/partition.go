package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// segment is one batch of a partition: it is done, and its offsets may be
// committed, when its worker finished with it and every hand-off it started
// has returned. pending counts the worker's own hold plus the hand-offs.
type segment struct {
	next    kgo.EpochOffset // offset after the batch's last record
	pending atomic.Int32
}

// partition is one owned partition: a queue filled by the poll loop, a
// worker that processes it in order, and the batches awaiting completion.
type partition struct {
	// handoffs (handoff.go) bring events to Temporal and the DLQ; through
	// it the partition waits on its dependencies (waits.go).
	*handoffs
	b      *Bridge
	topic  string
	id     int32
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup // the worker and its hand-offs
	tracer recordTracer   // tracing.go

	wake   chan struct{} // records were queued
	paused atomic.Bool   // fetching is paused (only the poll loop and callbacks change it)

	router router // what becomes of the decoded events (router.go)

	mu        sync.Mutex
	stopping  bool // set before waiting for wg: no more sweeper checks join it
	queue     []*kgo.Record
	qbytes    int64 // keys and values of queue
	segs      []*segment
	done      kgo.EpochOffset // everything before done.Offset is finished
	first     kgo.EpochOffset // the first record queued, offset -1 before one
	committed int64           // last offset committed by this bridge, -1 if none
	fencedOut bool            // another bridge claimed the partition (fenced)
	// reclaimAt is when the bridge next asks the group whether a fenced
	// partition is still its own (Bridge.reclaimFenced); reclaimWait the
	// wait after that, doubling up to the session timeout.
	reclaimAt   time.Time
	reclaimWait time.Duration
}

func newPartition(b *Bridge, topic string, id int32) *partition {
	ctx, cancel := context.WithCancel(b.ctx)
	p := &partition{
		b: b, topic: topic, id: id,
		log:    b.log.With("topic", topic, "partition", id),
		cancel: cancel,
		tracer: recordTracer{topic: topic, id: id},
		wake:   make(chan struct{}, 1),
		done:   kgo.EpochOffset{Epoch: -1, Offset: -1},
		first:  kgo.EpochOffset{Epoch: -1, Offset: -1},

		committed: -1,
	}
	p.handoffs = &handoffs{waits: &waits{ctx: ctx, opts: &b.opts, m: b.m}, log: p.log, wg: &p.wg, sem: b.sem, dlq: b.dlq, tracer: &p.tracer}
	p.router = newRouter(p)
	p.wg.Add(1)
	go p.run()
	return p
}

// stop cancels the worker and its hand-offs and waits for them. Work not
// finished stays uncommitted: the next owner of the partition redoes it,
// which the dedupe ledger and the workflow IDs make harmless.
func (p *partition) stop() {
	p.cancel()
	p.wait()
}

// fenced stops a partition another bridge has claimed since this one took
// it (parking.ErrFenced): it writes nothing more for it, commits no offset
// past what it finished, and waits for the group to take it away — or to
// say, when asked, that it is still this bridge's (Bridge.reclaimFenced).
func (p *partition) fenced(err error) {
	p.mu.Lock()
	first := !p.fencedOut
	if first {
		p.fencedOut = true
		p.reclaimWait = firstReclaimWait
		p.reclaimAt = time.Now().Add(p.reclaimWait)
	}
	p.mu.Unlock()
	if first {
		p.b.anyFenced.Store(true)
		p.m.fenced.Inc()
		p.log.Warn("partition claimed by another bridge: this one stops writing for it until the group takes it away",
			"event", "bridge_partition_fenced", "error", err.Error())
	}
	p.cancel()
}

// firstReclaimWait is how long a fenced partition waits before the bridge
// first asks the group whose it is.
const firstReclaimWait = time.Second

func (p *partition) isFenced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fencedOut
}

// reclaimDue says whether the bridge should ask the group, at now, whether
// the fenced partition is still its own.
func (p *partition) reclaimDue(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fencedOut && !now.Before(p.reclaimAt)
}

// reclaimLater sets the next time to ask: the wait doubles up to most.
func (p *partition) reclaimLater(now time.Time, most time.Duration) {
	p.mu.Lock()
	p.reclaimWait = min(2*p.reclaimWait, most)
	p.reclaimAt = now.Add(p.reclaimWait)
	p.mu.Unlock()
}

// wait waits for the worker, its hand-offs and sweeper checks after the
// partition's context is canceled.
func (p *partition) wait() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.wg.Wait()
}

// enqueue adds fetched records (in offset order) and returns the queue length.
func (p *partition) enqueue(recs []*kgo.Record) int {
	var size int64
	for _, r := range recs {
		size += recordBytes(r)
	}
	p.mu.Lock()
	if p.first.Offset < 0 && len(recs) > 0 {
		p.first = kgo.EpochOffset{Epoch: recs[0].LeaderEpoch, Offset: recs[0].Offset}
	}
	p.queue = append(p.queue, recs...)
	p.qbytes += size
	n := len(p.queue)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return n
}

// queued returns the queue's length in records and bytes.
func (p *partition) queued() (int, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue), p.qbytes
}

func recordBytes(r *kgo.Record) int64 { return int64(len(r.Key) + len(r.Value)) }

// take waits for queued records and returns at most MaxPollRecords of them,
// or nil when the partition is stopped.
func (p *partition) take() []*kgo.Record {
	for {
		p.mu.Lock()
		if n := len(p.queue); n > 0 {
			n = min(n, p.opts.MaxPollRecords)
			recs := make([]*kgo.Record, n)
			copy(recs, p.queue)
			for _, r := range recs {
				p.qbytes -= recordBytes(r)
			}
			rest := copy(p.queue, p.queue[n:])
			clear(p.queue[rest:])
			p.queue = p.queue[:rest]
			p.mu.Unlock()
			return recs
		}
		p.mu.Unlock()
		select {
		case <-p.ctx.Done():
			return nil
		case <-p.wake:
		}
	}
}

// resumeAt is where a partition that replaces this one fetches from: after
// what this one finished, else its first record; ok is false when it was
// given no record.
func (p *partition) resumeAt() (kgo.EpochOffset, bool) {
	done, _ := p.committable()
	p.mu.Lock()
	defer p.mu.Unlock()
	if done.Offset >= 0 {
		return done, true
	}
	return p.first, p.first.Offset >= 0
}

// committable returns the offset to commit, if it is past the last commit.
func (p *partition) committable() (kgo.EpochOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	for i < len(p.segs) && p.segs[i].pending.Load() == 0 {
		p.done = p.segs[i].next
		i++
	}
	if i > 0 {
		rest := copy(p.segs, p.segs[i:])
		clear(p.segs[rest:])
		p.segs = p.segs[:rest]
	}
	return p.done, p.done.Offset > p.committed
}

func (p *partition) setCommitted(offset int64) {
	p.mu.Lock()
	if offset > p.committed {
		p.committed = offset
	}
	p.mu.Unlock()
	p.m.committed.WithLabelValues(p.topic, strconv.Itoa(int(p.id))).Set(float64(offset))
}

func (p *partition) run() {
	defer p.wg.Done()
	// Decoding runs one batch ahead of applying, so a batch's decoding
	// overlaps the previous batch's round trips and commit.
	batches := make(chan *batch, 1)
	p.wg.Add(1)
	go p.decodeAhead(batches)
	defer p.router.close()
	if !p.router.open() {
		return
	}
	for {
		var bt *batch
		select {
		case bt = <-batches:
		case <-p.router.wake():
			p.busy()
			ok := p.router.between()
			p.idle()
			if !ok {
				return
			}
			continue
		case <-p.ctx.Done():
			return
		}
		p.busy()
		ok := p.process(bt)
		p.idle()
		if !ok {
			return
		}
	}
}

// decodeAhead takes queued records in batches, decodes them and passes
// them on in offset order; it stops with the partition.
func (p *partition) decodeAhead(out chan<- *batch) {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		recs := p.take()
		if recs == nil {
			return
		}
		if p.paused.Load() {
			p.b.wakePoll() // the queue shrank: fetching may resume
		}
		bt := p.decode(recs)
		select {
		case out <- bt:
		case <-p.ctx.Done():
			return
		}
	}
}

// item is a decoded event; projections are the cached catalog's answer to
// which projections list it (the apply decides with the catalog it uses).
type item struct {
	rec         *kgo.Record
	env         event.Envelope
	projections []string
}

// poison is a record that is not a valid envelope.
type poison struct {
	rec *kgo.Record
	err error
}

// batch is a partition batch, decoded: its events, and the records to
// dead-letter.
type batch struct {
	last     *kgo.Record
	items    []item
	poisoned []poison
}

// decode decodes one batch; it touches no service.
func (p *partition) decode(recs []*kgo.Record) *batch {
	b := p.b
	bt := &batch{last: recs[len(recs)-1], items: make([]item, 0, len(recs))}
	p.tracer.note(recs[0])
	for _, rec := range recs {
		b.m.consumed.Inc()
		env, err := event.Decode(rec.Value)
		if err == nil && len(rec.Key) > dlq.MaxKeyBytes {
			// Workflow inputs carry the key: bounded like the event.
			err = &event.InvalidError{Reason: fmt.Sprintf("record key is %d bytes, more than the %d allowed", len(rec.Key), dlq.MaxKeyBytes)}
		}
		if err != nil {
			bt.poisoned = append(bt.poisoned, poison{rec: rec, err: err})
			continue
		}
		// Whether a projection lists the event is decided by the apply, in
		// its transaction, against the catalog version it applies with: the
		// cached answer kept here may be a deploy behind.
		bt.items = append(bt.items, item{rec: rec, env: env, projections: b.opts.Engine.Projections(env.EventType)})
	}
	return bt
}

// process handles one decoded batch in offset order. It returns false when
// the partition was stopped before the batch was finished; the batch then
// stays uncommitted.
func (p *partition) process(bt *batch) bool {
	last, items := bt.last, bt.items
	seg := &segment{next: kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}}
	seg.pending.Store(1)
	p.mu.Lock()
	p.segs = append(p.segs, seg)
	p.mu.Unlock()

	for _, pr := range bt.poisoned {
		if !p.deadLetterPoison(pr.rec, pr.err) {
			return false
		}
	}

	if len(items) > 0 && !p.router.route(seg, items, last) {
		return false
	}
	seg.pending.Add(-1)
	return true
}

func (p *partition) retryInput(it item, projection string, first *contract.Attempt) contract.RetryInput {
	return contract.RetryInput{
		Event:        it.env,
		Projection:   projection,
		Key:          it.rec.Key,
		Source:       sourceOf(it.rec),
		Mode:         p.opts.Mode,
		FirstAttempt: first,
		Retry:        p.opts.Retry,
		ReplayWindow: p.opts.ReplayWindow,
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The inline apply: through database outages, isolating a batch that
// fails as a whole, and counting outcomes.

// countOutcomes counts a batch's outcomes in the metrics, and the events no
// projection listed in the apply as skipped, and returns, in order, the
// outcomes that still need a hand-off: failed and held pairs.
func (p *partition) countOutcomes(items []item, outcomes []projection.Result) []projection.Result {
	m := p.m
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
	r, ok := p.opts.Engine.(catalogRefresher)
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
	// Which projections list it is decided by the catalog as it is now, not
	// by the cache read when the batch was decoded: a projection deployed
	// since would miss the event.
	if !p.refreshCatalog() {
		return false
	}
	it.projections = p.opts.Engine.Projections(it.env.EventType)
	if len(it.projections) == 0 {
		// The cache lists no projection for it, so no retry workflow can be
		// named: it can never be applied here, dead-letter it now.
		r := dlq.RunRecord(contract.DeadLetterInput{Event: it.env, Key: it.rec.Key, Source: sourceOf(it.rec),
			Attempts: []contract.Attempt{*first}}, first.StartedAt)
		return p.publishDeadLetter(p.recordLog(it.rec), "event", it.rec.Key, r)
	}
	for _, proj := range it.projections {
		p.m.failed.WithLabelValues(first.ErrorKind).Inc()
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
// times, then isolated. Each try runs with apply's context, which ends
// past Options.DatabaseTryTimeout or once the try is found waiting on a
// silent connection (watch); the latter is retried as an outage, never
// counted against the batch.
func (p *partition) applyThroughOutage(items []item, last *kgo.Record, apply func(ctx context.Context) ([]projection.Result, error)) ([]projection.Result, applyResult) {
	span := p.tracer.startBatchSpan(items, last)
	defer span.End()
	r := p.retrier(p.log, p.database())
	const outageMsg = "database unreachable: partition paused, retrying the batch with backoff"
	for {
		w := r.watch(p.opts.DatabaseTryTimeout, outageMsg, append(offsetAttrs(items, last), "events", len(items))...)
		outcomes, err := apply(w.ctx)
		hung := w.stop(r)
		p.beat()
		if p.ctx.Err() != nil {
			return nil, applyResult{verdict: verdictStopped}
		}
		if hung == errSilentConnection {
			r.outageTry(outageMsg, hung, append(offsetAttrs(items, last), "events", len(items))...)
			continue
		}
		if hung != nil {
			outcomes, err = nil, hung
		}
		if !isOutage(outcomes, err) {
			if !r.outage.IsZero() {
				p.log.Info("database reachable again: batch applied, partition resumed",
					append([]any{"event", "bridge_outage_over", "dependency", "database", "pausedFor", r.pausedFor()}, offsetAttrs(items, last)...)...)
			}
			return outcomes, applyResult{}
		}
		if err == nil {
			err = firstConnectionError(outcomes)
		}
		if r.failed(outageMsg, err, append(offsetAttrs(items, last), "events", len(items))...) {
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

// offsetAttrs are the log attributes of a batch's offsets; a release of
// parked events has no records, and says so instead.
func offsetAttrs(items []item, last *kgo.Record) []any {
	if items[0].rec == nil || last == nil {
		return []any{"parkedRelease", true}
	}
	return []any{"firstOffset", items[0].rec.Offset, "lastOffset", last.Offset}
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
