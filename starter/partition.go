package starter

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
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
	b      *Bridge
	topic  string
	id     int32
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the worker and its hand-offs

	wake   chan struct{} // records were queued
	paused atomic.Bool   // fetching is paused (only the poll loop and callbacks change it)

	ord *ordering // CAUSET_ORDERING=entity in inline mode; nil otherwise

	mu        sync.Mutex
	stopping  bool // set before waiting for wg: no more sweeper checks join it
	queue     []*kgo.Record
	qbytes    int64 // keys and values of queue
	segs      []*segment
	done      kgo.EpochOffset // everything before done.Offset is finished
	committed int64           // last offset committed by this bridge, -1 if none
}

func newPartition(b *Bridge, topic string, id int32) *partition {
	ctx, cancel := context.WithCancel(b.ctx)
	p := &partition{
		b: b, topic: topic, id: id,
		log:    b.log.With("topic", topic, "partition", id),
		ctx:    ctx,
		cancel: cancel,
		wake:   make(chan struct{}, 1),
		done:   kgo.EpochOffset{Epoch: -1, Offset: -1},

		committed: -1,
	}
	if b.opts.ordered() {
		p.ord = newOrdering()
		p.wg.Add(1)
		go p.runSender()
	}
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
			n = min(n, p.b.opts.MaxPollRecords)
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
	p.b.m.committed.WithLabelValues(p.topic, strconv.Itoa(int(p.id))).Set(float64(offset))
}

func (p *partition) run() {
	defer p.wg.Done()
	// Decoding runs one batch ahead of applying, so a batch's decoding
	// overlaps the previous batch's round trips and commit.
	batches := make(chan *batch, 1)
	p.wg.Add(1)
	go p.decodeAhead(batches)
	if p.ord != nil {
		defer p.releaseOrdering()
		// Blocked keys first: no event of a blocked key may apply inline.
		if !p.loadBlocked() {
			return
		}
	}
	for {
		var bt *batch
		select {
		case bt = <-batches:
		case <-p.ctx.Done():
			return
		}
		if p.ord != nil && !p.waitRoom() {
			return
		}
		if !p.process(bt) {
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

func (p *partition) recordLog(rec *kgo.Record) *slog.Logger {
	return p.log.With("offset", rec.Offset)
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
	for _, rec := range recs {
		b.m.consumed.Inc()
		env, err := event.Decode(rec.Value)
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
	b := p.b
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

	if len(items) > 0 {
		switch b.opts.Mode {
		case config.ModeWorkflow:
			// The workflow applies later; the skip is decided here, against
			// the catalog as it is now, not a cache a deploy behind.
			p.refreshCatalog()
			for _, it := range items {
				projs := b.opts.Engine.Projections(it.env.EventType)
				if len(projs) == 0 {
					b.m.skipped.Inc()
				}
				for _, proj := range projs {
					if !p.handOff(seg, it.rec, p.retryInput(it, proj, nil)) {
						return false
					}
				}
			}
		default:
			apply := p.applyInline
			if p.ord != nil {
				apply = p.applyOrdered
			}
			if !apply(seg, items, last) {
				return false
			}
		}
	}
	seg.pending.Add(-1)
	return true
}

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
		if p.databaseAnswers() {
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

// databaseAnswers probes the database; without a probe every batch-level
// failure counts as an outage.
func (p *partition) databaseAnswers() bool {
	if p.b.opts.Probe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	return p.b.opts.Probe(ctx) == nil
}

func (p *partition) retryInput(it item, projection string, first *workflows.Attempt) workflows.RetryInput {
	return workflows.RetryInput{
		Event:        it.env,
		Projection:   projection,
		Key:          it.rec.Key,
		Source:       sourceOf(it.rec),
		Mode:         p.b.opts.Mode,
		FirstAttempt: first,
		Retry:        p.b.opts.Retry,
		ReplayWindow: p.b.opts.ReplayWindow,
	}
}

// handOff starts the retry workflow of in without blocking the partition on
// Temporal: it waits only for a slot of MaxInflight, then the start runs in
// its own goroutine and is retried with capped backoff until it returns
// (Temporal unavailable: the segment stays pending, so offsets stop at it).
// It returns false when the partition was stopped while waiting for a slot.
func (p *partition) handOff(seg *segment, rec *kgo.Record, in workflows.RetryInput) bool {
	b := p.b
	select {
	case b.sem <- struct{}{}:
	case <-p.ctx.Done():
		return false
	}
	seg.pending.Add(1)
	b.m.inflight.Inc()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			<-b.sem
			b.m.inflight.Dec()
		}()
		log := p.eventLog(rec, in)
		outage, end := p.startUntilDurable(log, in)
		switch end {
		case handoffStopped:
			return // not handed off, not committed
		case handoffStarted:
			b.m.handedOff.WithLabelValues(string(in.Mode)).Inc()
			logHandOff(log, in, outage)
		}
		seg.pending.Add(-1)
	}()
	return true
}

func (p *partition) eventLog(rec *kgo.Record, in workflows.RetryInput) *slog.Logger {
	return p.recordLog(rec).With("projectionName", in.Projection, "eventType", in.Event.EventType,
		"entityId", in.Event.EntityID, "forkId", in.Event.ForkID, "eventId", in.Event.EventID)
}

// startUntilDurable starts in's retry workflow, retrying with capped
// backoff while Temporal is unavailable (offsets stop at the event
// meanwhile). An event whose workflow Temporal refuses (classifyStart) is
// dead-lettered here instead. It returns when an outage began (zero if there
// was none) and how the hand-off ended.
func (p *partition) startUntilDurable(log *slog.Logger, in workflows.RetryInput) (time.Time, handoffEnd) {
	b := p.b
	return p.untilStarted(log, in, func(ctx context.Context) error {
		return startRetryWorkflow(ctx, b.opts.Starter, b.opts.TaskQueue, in)
	})
}

// untilStarted runs start until it succeeds, classifying each failure once:
// throttling or a Temporal that does not answer its probe is an outage
// (wait, retry the same start); a refusal of the event's workflow itself
// (invalid argument: an ID, search attribute or input Temporal cannot store)
// or failures while Temporal answers, maxHealthyStartFailures times, make
// the event invalid: it is dead-lettered at once.
func (p *partition) untilStarted(log *slog.Logger, in workflows.RetryInput, start func(ctx context.Context) error) (time.Time, handoffEnd) {
	b := p.b
	bo := newBackoff(b.opts.MinBackoff, b.opts.MaxBackoff)
	var outage time.Time
	healthy := 0
	for {
		ctx, cancel := context.WithTimeout(p.ctx, b.opts.StartTimeout)
		err := start(ctx)
		cancel()
		if err == nil {
			return outage, handoffStarted
		}
		if p.ctx.Err() != nil {
			return outage, handoffStopped
		}
		refused := isRefusal(err)
		if !refused && !isThrottled(err) && p.temporalAnswers() {
			healthy++
			refused = healthy >= maxHealthyStartFailures
		}
		if refused {
			if !p.deadLetterRefused(log, in, err) {
				return outage, handoffStopped
			}
			return outage, handoffDeadLettered
		}
		b.m.handoffRetry.Inc()
		if outage.IsZero() {
			outage = time.Now()
			b.m.outages.WithLabelValues("temporal").Inc()
			log.Warn("cannot start retry workflow: offsets stop here, retrying with backoff",
				"event", "bridge_outage", "dependency", "temporal", "error", err.Error())
		} else {
			log.Debug("still cannot start retry workflow", "dependency", "temporal", "error", err.Error())
		}
		if bo.wait(p.ctx) != nil {
			return outage, handoffStopped
		}
	}
}

// handoffEnd is how handing an event to Temporal ended.
type handoffEnd int

const (
	handoffStarted      handoffEnd = iota // its workflow is durable (or its lane took it)
	handoffDeadLettered                   // Temporal refused it: dead-lettered as invalid_event
	handoffStopped                        // the partition stopped first: not committed
)

// maxHealthyStartFailures bounds the failed starts of one event while
// Temporal answers its probe: past it the event, not Temporal, is at fault.
const maxHealthyStartFailures = 5

// isRefusal reports a start Temporal refused because of the request itself:
// retrying the same request can never succeed.
func isRefusal(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia)
}

// isThrottled reports a start refused for capacity (rate limits): Temporal
// answers but is saturated, an outage of capacity.
func isThrottled(err error) bool {
	var re *serviceerror.ResourceExhausted
	return errors.As(err, &re)
}

// temporalAnswers probes Temporal; without a probe every failed start
// counts as an outage.
func (p *partition) temporalAnswers() bool {
	if p.b.opts.TemporalProbe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	return p.b.opts.TemporalProbe(ctx) == nil
}

// deadLetterRefused writes an event whose retry workflow Temporal refused
// to the DLQ as invalid_event, keeping its failed attempt 1 if it had one.
func (p *partition) deadLetterRefused(log *slog.Logger, in workflows.RetryInput, cause error) bool {
	now := time.Now().UTC()
	msg := "temporal refused the retry workflow: " + cause.Error()
	var attempts []workflows.Attempt
	if in.FirstAttempt != nil {
		attempts = append(attempts, *in.FirstAttempt)
	}
	attempts = append(attempts, workflows.Attempt{Number: len(attempts) + 1, StartedAt: now, ErrorKind: errorKindInvalid, Error: msg})
	r := activities.BuildRecord(workflows.DeadLetterInput{
		Event: in.Event, Key: in.Key, Projection: in.Projection, Attempts: attempts, Source: in.Source,
	}, now)
	if in.FirstAttempt != nil {
		r.IRVersion = in.FirstAttempt.IRVersion
	}
	return p.publishDeadLetter(log, "refused event", in.Key, r)
}

// logHandOff writes, for a failed inline attempt 1, the contract's
// projection_retry line (or projection_dead_lettered when the schedule has
// a single attempt), once the retry workflow that owns the rest is durable.
func logHandOff(log *slog.Logger, in workflows.RetryInput, outage time.Time) {
	attrs := []any{"workflowId", workflows.RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)}
	if !outage.IsZero() {
		attrs = append(attrs, "delayedBy", time.Since(outage).Round(time.Millisecond).String())
	}
	if in.FirstAttempt == nil {
		log.Debug("handed to Temporal", append(attrs, "event", "projection_handoff")...)
		return
	}
	attrs = append(attrs, "retryAttempt", 1, "error", in.FirstAttempt.Error, "errorKind", in.FirstAttempt.ErrorKind)
	if next, ok := in.Retry.Plan(in.Mode).NextDelay(1); ok {
		log.Warn("projection_retry", append(attrs, "event", "projection_retry", "nextRetryIn", next.String())...)
		return
	}
	log.Error("projection_dead_lettered", append(attrs, "event", "projection_dead_lettered")...)
}

func sourceOf(rec *kgo.Record) workflows.Source {
	return workflows.Source{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
}

// errorKindInvalid is the error kind of an event that can never succeed.
const errorKindInvalid = "invalid_event"

// deadLetterPoison writes a record that is not a valid envelope to the DLQ
// (raw bytes kept, errorKind invalid_event) before its offset can be
// committed. False when stopped first.
func (p *partition) deadLetterPoison(rec *kgo.Record, cause error) bool {
	now := time.Now().UTC()
	r := dlq.Record{
		RawValue:       rec.Value,
		ErrorKind:      errorKindInvalid,
		Error:          cause.Error(),
		RetryCount:     0,
		Attempts:       []workflows.Attempt{{Number: 1, StartedAt: now, ErrorKind: errorKindInvalid, Error: cause.Error()}},
		FirstFailedAt:  now,
		DeadLetteredAt: now,
		Source:         sourceOf(rec),
	}
	return p.publishDeadLetter(p.recordLog(rec), "poison record", rec.Key, r)
}

// publishDeadLetter writes r to the DLQ, retrying with capped backoff while
// Kafka refuses it. False when stopped first.
func (p *partition) publishDeadLetter(log *slog.Logger, what string, key []byte, r dlq.Record) bool {
	b := p.b
	bo := newBackoff(b.opts.MinBackoff, b.opts.MaxBackoff)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, b.opts.StartTimeout)
		at, err := b.dlq.Publish(ctx, key, r)
		cancel()
		if err == nil {
			b.m.deadLettered.Inc()
			log.Warn(what+" dead-lettered", "event", "projection_dead_lettered", "errorKind", r.ErrorKind,
				"error", r.Error, "dlqTopic", at.Topic, "dlqPartition", at.Partition, "dlqOffset", at.Offset)
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		log.Warn("cannot dead-letter "+what+", retrying with backoff", "dependency", "kafka", "error", err.Error())
		if bo.wait(p.ctx) != nil {
			return false
		}
	}
}

func firstConnectionError(outcomes []Outcome) error {
	for _, o := range outcomes {
		if o.Status == StatusFailed && o.ErrorKind == ErrorKindConnection && o.Err != nil {
			return o.Err
		}
	}
	return errOutage
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
