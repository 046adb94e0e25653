package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
)

// peer is the seed's original design as a minimal consumer: one goroutine
// per partition applies each polled batch with the same projection engine
// (one transaction per batch, like the bridge, so the comparison isolates
// the retry design), and retries every failed (projection, event) pair in
// place on the retry schedule — the partition waits — then dead-letters it
// to the DLQ topic and moves on. Offsets are marked after a batch and
// committed by the client's autocommit.
type peer struct {
	cl       *kgo.Client
	engine   *projection.Engine
	plan     config.Plan
	dlqTopic string

	processed    atomic.Int64
	deadLettered atomic.Int64
	errs         chan error
}

// runPeer consumes total records of topic with group and returns the
// elapsed time from the first fetched record to the last processed one.
func runPeer(ctx context.Context, kafka []kgo.Opt, topic, group, dlqTopic string, engine *projection.Engine, retry config.Retry, total int) (time.Duration, int, error) {
	p := &peer{engine: engine, plan: retry.Plan(config.ModeInline), dlqTopic: dlqTopic, errs: make(chan error, 16)}
	cl, err := kgo.NewClient(append(slices.Clone(kafka),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.AutoCommitMarks(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	p.cl = cl

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	lanes := map[int32]chan []*kgo.Record{}
	var start time.Time
	for int(p.processed.Load()) < total {
		select {
		case err := <-p.errs:
			cancel()
			wg.Wait()
			return 0, 0, err
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := cl.PollRecords(pctx, starter.DefaultMaxPollRecords)
		pcancel()
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		fs.EachError(func(t string, part int32, err error) {
			if err != context.DeadlineExceeded && err != context.Canceled {
				select {
				case p.errs <- fmt.Errorf("peer fetch %s/%d: %w", t, part, err):
				default:
				}
			}
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			if start.IsZero() {
				start = time.Now()
			}
			ch, ok := lanes[ftp.Partition]
			if !ok {
				ch = make(chan []*kgo.Record, 1<<16)
				lanes[ftp.Partition] = ch
				wg.Go(func() { p.lane(ctx, ch) })
			}
			ch <- ftp.Records
		})
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return elapsed, int(p.deadLettered.Load()), nil
}

func (p *peer) fail(err error) {
	select {
	case p.errs <- err:
	default:
	}
}

// lane processes one partition's batches in order.
func (p *peer) lane(ctx context.Context, ch <-chan []*kgo.Record) {
	for {
		var recs []*kgo.Record
		select {
		case <-ctx.Done():
			return
		case recs = <-ch:
		}
		evs := make([]event.Envelope, 0, len(recs))
		for _, r := range recs {
			ev, err := event.Decode(r.Value)
			if err != nil {
				p.fail(fmt.Errorf("peer: decode: %w", err))
				return
			}
			evs = append(evs, ev)
		}
		res, err := p.engine.ApplyBatch(ctx, evs)
		if err != nil {
			if ctx.Err() == nil {
				p.fail(fmt.Errorf("peer: apply batch: %w", err))
			}
			return
		}
		for _, r := range res {
			if r.Status != projection.StatusFailed {
				continue
			}
			if !p.retryInPlace(ctx, r, evs[r.Index], recs[r.Index]) {
				return
			}
		}
		p.cl.MarkCommitRecords(recs[len(recs)-1])
		p.processed.Add(int64(len(recs)))
	}
}

// retryInPlace runs attempts 2..N of one failed pair on the schedule,
// blocking the partition, then dead-letters it. It returns false when the
// context ended or the DLQ write failed.
func (p *peer) retryInPlace(ctx context.Context, first projection.Result, ev event.Envelope, rec *kgo.Record) bool {
	lastErr := ""
	if first.Err != nil {
		lastErr = first.Err.Error()
	}
	for _, d := range p.plan.Delays {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
		res, err := p.engine.Apply(ctx, first.Projection, ev)
		if err == nil && res.Status != projection.StatusFailed {
			return true
		}
		if res.Err != nil {
			lastErr = res.Err.Error()
		} else if err != nil {
			lastErr = err.Error()
		}
	}
	value, _ := json.Marshal(map[string]any{
		"schemaVersion": 1, "event": ev, "projectionName": first.Projection, "error": lastErr,
		"retryCount": len(p.plan.Delays), "source": map[string]any{"topic": rec.Topic, "partition": rec.Partition, "offset": rec.Offset},
	})
	if err := p.cl.ProduceSync(ctx, &kgo.Record{Topic: p.dlqTopic, Key: rec.Key, Value: value}).FirstErr(); err != nil {
		if ctx.Err() == nil {
			p.fail(fmt.Errorf("peer: dead letter: %w", err))
		}
		return false
	}
	p.deadLettered.Add(1)
	return true
}
