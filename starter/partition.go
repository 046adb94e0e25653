package starter

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
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

	router router // what becomes of the decoded events (router.go)
	// tp is the tracer provider of the partition's traced records
	// (tracing.go), for events released without a record.
	tp atomic.Value

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
	defer p.router.close()
	if !p.router.open() {
		return
	}
	for {
		var bt *batch
		select {
		case bt = <-batches:
		case <-p.router.wake():
			if !p.router.between() {
				return
			}
			continue
		case <-p.ctx.Done():
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
	p.noteTracer(recs[0])
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
		Mode:         p.b.opts.Mode,
		FirstAttempt: first,
		Retry:        p.b.opts.Retry,
		ReplayWindow: p.b.opts.ReplayWindow,
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
