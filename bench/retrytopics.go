package bench

// The retry-topics peer: the design most Kafka users pick instead of a
// workflow engine (Spring Kafka's @RetryableTopic, Uber's reprocessing
// topics). A failed (projection, event) pair is not retried in place: it is
// produced to a delay topic for its next attempt, and the partition moves on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
)

// Headers of a record on a delay topic (kept on the DLQ record too), in the
// spirit of Spring's retry-topic headers.
const (
	hdrAttempt    = "causet-retry-attempt"    // the attempt the record is for, 2..MaxAttempts
	hdrProjection = "causet-retry-projection" // the one projection to apply the event to
	hdrDue        = "causet-retry-due"        // unix ms: record timestamp + the topic's delay
	hdrError      = "causet-retry-error"      // the previous attempt's error
	hdrTopic      = "causet-original-topic"
	hdrPartition  = "causet-original-partition"
	hdrOffset     = "causet-original-offset"
)

// retryMeta is what the headers of a delay-topic record carry.
type retryMeta struct {
	Attempt    int
	Projection string
	Due        time.Time
	Err        string
	Topic      string
	Partition  int32
	Offset     int64
}

func (m retryMeta) headers() []kgo.RecordHeader {
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	return []kgo.RecordHeader{
		h(hdrAttempt, strconv.Itoa(m.Attempt)),
		h(hdrProjection, m.Projection),
		h(hdrDue, strconv.FormatInt(m.Due.UnixMilli(), 10)),
		h(hdrError, m.Err),
		h(hdrTopic, m.Topic),
		h(hdrPartition, strconv.FormatInt(int64(m.Partition), 10)),
		h(hdrOffset, strconv.FormatInt(m.Offset, 10)),
	}
}

// parseRetryMeta reads the headers of a delay-topic record; every one is required.
func parseRetryMeta(hs []kgo.RecordHeader) (retryMeta, error) {
	v := make(map[string]string, len(hs))
	for _, h := range hs {
		v[h.Key] = string(h.Value)
	}
	var m retryMeta
	var errs []error
	num := func(key string, bits int) int64 {
		s, ok := v[key]
		if !ok {
			errs = append(errs, fmt.Errorf("no %s header", key))
			return 0
		}
		n, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			errs = append(errs, fmt.Errorf("header %s: %w", key, err))
		}
		return n
	}
	str := func(key string) string {
		s, ok := v[key]
		if !ok {
			errs = append(errs, fmt.Errorf("no %s header", key))
		}
		return s
	}
	m.Attempt = int(num(hdrAttempt, 32))
	m.Projection = str(hdrProjection)
	m.Due = time.UnixMilli(num(hdrDue, 64))
	m.Err = str(hdrError)
	m.Topic = str(hdrTopic)
	m.Partition = int32(num(hdrPartition, 32))
	m.Offset = num(hdrOffset, 64)
	if err := errors.Join(errs...); err != nil {
		return retryMeta{}, err
	}
	if m.Attempt < 2 || m.Projection == "" {
		return retryMeta{}, fmt.Errorf("attempt %d, projection %q: not a retry record", m.Attempt, m.Projection)
	}
	return m, nil
}

// retryTopology names a main topic's delay topics and says where a failed
// attempt goes: delay topic k (k = 1..MaxAttempts-1) carries attempt k+1
// after the schedule's k-th delay; the last attempt's failure goes to dlq.
type retryTopology struct {
	main   string
	dlq    string
	delays []time.Duration
}

func newRetryTopology(main, dlq string, r config.Retry) retryTopology {
	return retryTopology{main: main, dlq: dlq, delays: r.Plan(config.ModeInline).Delays}
}

// delayTopic is the name of delay topic k.
func (t retryTopology) delayTopic(k int) string { return t.main + "-retry-" + strconv.Itoa(k) }

// topics are the delay topics, in attempt order.
func (t retryTopology) topics() []string {
	out := make([]string, len(t.delays))
	for k := range out {
		out[k] = t.delayTopic(k + 1)
	}
	return out
}

// next is where the failure of attempt failed goes: the delay topic of the
// next attempt and its delay, or the DLQ topic (dead) after the last.
func (t retryTopology) next(failed int) (topic string, delay time.Duration, dead bool) {
	if failed >= 1 && failed <= len(t.delays) {
		return t.delayTopic(failed), t.delays[failed-1], false
	}
	return t.dlq, 0, true
}

// forward is the record that carries the failure of attempt m.Attempt of
// rec (m's origin and projection) on: to the next delay topic, stamped now
// and due after its delay, with the event as it came; or, after the last
// attempt, to the DLQ topic with the same value the in-place peer writes.
func (t retryTopology) forward(rec *kgo.Record, m retryMeta, ev event.Envelope, lastErr string, now time.Time) (*kgo.Record, bool, error) {
	topic, delay, dead := t.next(m.Attempt)
	out := retryMeta{Attempt: m.Attempt + 1, Projection: m.Projection, Due: now.Add(delay), Err: lastErr,
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	value := rec.Value
	if dead {
		out.Attempt, out.Due = m.Attempt, now
		var err error
		value, err = json.Marshal(map[string]any{
			"schemaVersion": 1, "event": ev, "projectionName": m.Projection, "error": lastErr,
			"retryCount": m.Attempt - 1, "source": map[string]any{"topic": m.Topic, "partition": m.Partition, "offset": m.Offset},
		})
		if err != nil {
			return nil, false, err
		}
	}
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: value, Timestamp: now, Headers: out.headers()}, dead, nil
}

// errText is the error of a failed pair (the result's, else the call's).
func errText(res projection.Result, err error) string {
	switch {
	case res.Err != nil:
		return res.Err.Error()
	case err != nil:
		return err.Error()
	}
	return ""
}

// retryTopicsStats are the counts of one run; in the bench every event has
// one (projection, event) pair, so pairs and events are one to one.
type retryTopicsStats struct {
	Elapsed time.Duration // first fetched record → the last event applied or dead-lettered
	Drain   time.Duration // first fetched record → the events topic's last record applied or forwarded
	Main    int           // records of the events topic applied or forwarded
	Applied int           // pairs applied (or duplicate) at attempt 1
	// Forwarded counts attempt-1 failures produced to the first delay topic.
	Forwarded int
	// Retried counts records consumed from the delay topics; RetryApplied
	// those of them whose attempt applied.
	Retried      int
	RetryApplied int
	DeadLettered int
	// Lateness is the worst start of a delay-topic attempt behind its due time.
	Lateness time.Duration
}

// check holds a run of n events, nf of them failing every attempt, to the
// schedule's retries attempts after the first: every event settled once.
func (s retryTopicsStats) check(n, nf, retries int) error {
	var errs []error
	if s.Main != n {
		errs = append(errs, fmt.Errorf("events topic: %d of %d records applied or forwarded", s.Main, n))
	}
	if got := s.Applied + s.RetryApplied + s.DeadLettered; got != n {
		errs = append(errs, fmt.Errorf("%d applied + %d applied on retry + %d dead-lettered = %d, want %d", s.Applied, s.RetryApplied, s.DeadLettered, got, n))
	}
	if s.Forwarded != nf || s.DeadLettered != nf || s.RetryApplied != 0 {
		errs = append(errs, fmt.Errorf("%d forwarded, %d dead-lettered, %d applied on retry; want %d, %d and 0 (failing events fail every attempt)", s.Forwarded, s.DeadLettered, s.RetryApplied, nf, nf))
	}
	if want := nf * retries; s.Retried != want {
		errs = append(errs, fmt.Errorf("%d records consumed from the delay topics, want %d", s.Retried, want))
	}
	return errors.Join(errs...)
}

// retryTopics is one run: the main consumer and a consumer per delay topic,
// each a group of its own.
type retryTopics struct {
	engine *projection.Engine
	topo   retryTopology
	total  int

	start        atomic.Int64 // unix ns of the first fetched record
	drained      atomic.Int64 // unix ns the events topic's last record was done
	main         atomic.Int64
	applied      atomic.Int64
	forwarded    atomic.Int64
	retried      atomic.Int64
	retryApplied atomic.Int64
	deadLettered atomic.Int64
	settled      atomic.Int64
	lateness     atomic.Int64 // ns, the worst so far

	once sync.Once
	end  time.Time
	done chan struct{}
	errs chan error
}

func (rt *retryTopics) fail(err error) {
	select {
	case rt.errs <- err:
	default:
	}
}

// settle counts k events applied or dead-lettered; the one that completes
// the run stamps its end.
func (rt *retryTopics) settle(k int) {
	if k > 0 && rt.settled.Add(int64(k)) >= int64(rt.total) {
		rt.once.Do(func() {
			rt.end = time.Now()
			close(rt.done)
		})
	}
}

// runRetryTopics consumes total events of topo.main with group and settles
// every one: applied, or forwarded through the delay topics to the DLQ.
func runRetryTopics(ctx context.Context, kafka []kgo.Opt, topo retryTopology, group string, engine *projection.Engine, total int, timeout time.Duration) (retryTopicsStats, error) {
	rt := &retryTopics{engine: engine, topo: topo, total: total, done: make(chan struct{}), errs: make(chan error, 16)}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clients []*kgo.Client
	defer func() {
		cancel()
		wg.Wait()
		for _, cl := range clients {
			cl.Close()
		}
	}()
	client := func(topic, group string, maxWait time.Duration, opts ...kgo.Opt) (*kgo.Client, error) {
		cl, err := kgo.NewClient(append(append(slices.Clone(kafka),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.AutoCommitMarks(),
			kgo.FetchMaxWait(maxWait),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			// Every produce is waited for before the record's offset is
			// marked; lingering would only delay it.
			kgo.ProducerLinger(0),
		), opts...)...)
		if err == nil {
			clients = append(clients, cl)
		}
		return cl, err
	}

	// The delay consumers join their groups before the main consumer
	// starts, so no join lands in the measured time.
	joined := make(chan struct{}, len(topo.delays))
	for k := range topo.delays {
		topic := topo.delayTopic(k + 1)
		var once sync.Once
		// A short fetch wait: a resumed partition is not held behind a long
		// poll of the others (this favours retry topics, not the bridge).
		cl, err := client(topic, topic+"-g", 100*time.Millisecond,
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
				once.Do(func() { joined <- struct{}{} })
			}))
		if err != nil {
			return retryTopicsStats{}, err
		}
		wg.Go(func() {
			rt.consume(ctx, cl, topic, func() {}, func(ctx context.Context, recs []*kgo.Record) error {
				return rt.retryBatch(ctx, cl, recs)
			})
		})
	}
	joinBy := time.After(time.Minute)
	for range topo.delays {
		select {
		case <-joined:
		case err := <-rt.errs:
			return retryTopicsStats{}, err
		case <-joinBy:
			return retryTopicsStats{}, errors.New("retry topics: delay consumers did not join their groups within a minute")
		case <-ctx.Done():
			return retryTopicsStats{}, ctx.Err()
		}
	}

	cl, err := client(topo.main, group, 500*time.Millisecond)
	if err != nil {
		return retryTopicsStats{}, err
	}
	wg.Go(func() {
		rt.consume(ctx, cl, topo.main, func() {
			rt.start.CompareAndSwap(0, time.Now().UnixNano())
		}, func(ctx context.Context, recs []*kgo.Record) error {
			return rt.mainBatch(ctx, cl, recs)
		})
	})

	select {
	case <-rt.done:
	case err := <-rt.errs:
		return retryTopicsStats{}, err
	case <-ctx.Done():
		return retryTopicsStats{}, ctx.Err()
	case <-time.After(timeout):
		return retryTopicsStats{}, fmt.Errorf("retry topics: timed out after %s: %d of %d events settled (%d applied, %d forwarded, %d retried, %d dead-lettered)",
			timeout, rt.settled.Load(), total, rt.applied.Load(), rt.forwarded.Load(), rt.retried.Load(), rt.deadLettered.Load())
	}
	cancel()
	wg.Wait()
	start := time.Unix(0, rt.start.Load())
	return retryTopicsStats{
		Elapsed: rt.end.Sub(start), Drain: time.Unix(0, rt.drained.Load()).Sub(start),
		Main: int(rt.main.Load()), Applied: int(rt.applied.Load()), Forwarded: int(rt.forwarded.Load()),
		Retried: int(rt.retried.Load()), RetryApplied: int(rt.retryApplied.Load()), DeadLettered: int(rt.deadLettered.Load()),
		Lateness: time.Duration(rt.lateness.Load()),
	}, nil
}

// consume polls cl until ctx ends and hands each partition's records, in
// order, to a goroutine of that partition running handle; fetched is
// called for every non-empty partition batch.
func (rt *retryTopics) consume(ctx context.Context, cl *kgo.Client, name string, fetched func(), handle func(context.Context, []*kgo.Record) error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	lanes := map[int32]chan []*kgo.Record{}
	for {
		fs := cl.PollRecords(ctx, starter.DefaultMaxPollRecords)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			rt.fail(fmt.Errorf("retry topics: fetch %s/%d: %w", t, p, err))
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			fetched()
			ch, ok := lanes[ftp.Partition]
			if !ok {
				ch = make(chan []*kgo.Record, 1<<16)
				lanes[ftp.Partition] = ch
				wg.Go(func() {
					for {
						select {
						case <-ctx.Done():
							return
						case recs := <-ch:
							if err := handle(ctx, recs); err != nil {
								if ctx.Err() == nil {
									rt.fail(fmt.Errorf("retry topics: %s/%d: %w", name, ftp.Partition, err))
								}
								return
							}
						}
					}
				})
			}
			ch <- ftp.Records
		})
	}
}

// mainBatch applies one partition batch of the events topic in one
// transaction, produces each failed pair to the first delay topic, and
// marks the batch once every produce is acknowledged.
func (rt *retryTopics) mainBatch(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	evs := make([]event.Envelope, len(recs))
	for i, r := range recs {
		ev, err := event.Decode(r.Value)
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		evs[i] = ev
	}
	res, err := rt.engine.ApplyBatch(ctx, evs)
	if err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	now := time.Now()
	var out []*kgo.Record
	failed := map[int]bool{}
	dead := 0
	for _, r := range res {
		if r.Status != projection.StatusFailed {
			continue
		}
		failed[r.Index] = true
		rec := recs[r.Index]
		m := retryMeta{Attempt: 1, Projection: r.Projection, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		fwd, d, err := rt.topo.forward(rec, m, evs[r.Index], errText(r, nil), now)
		if err != nil {
			return err
		}
		if d {
			dead++
		}
		out = append(out, fwd)
	}
	if len(out) > 0 {
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return fmt.Errorf("produce to %s: %w", out[0].Topic, err)
		}
	}
	cl.MarkCommitRecords(recs[len(recs)-1])
	rt.applied.Add(int64(len(recs) - len(failed)))
	rt.forwarded.Add(int64(len(out) - dead))
	rt.deadLettered.Add(int64(dead))
	if rt.main.Add(int64(len(recs))) >= int64(rt.total) {
		rt.drained.CompareAndSwap(0, time.Now().UnixNano())
	}
	rt.settle(len(recs) - len(failed) + dead)
	return nil
}

// retryBatch runs the attempts a delay topic's partition batch carries, in
// order. A record not yet due pauses the partition's fetching (the records
// in hand are kept, later ones stay in Kafka) until it is, as Spring's
// back-off manager does, rather than holding up the client's other
// partitions. Each record's offset is marked once it is applied or
// forwarded (produce acknowledged).
func (rt *retryTopics) retryBatch(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	for _, rec := range recs {
		m, err := parseRetryMeta(rec.Headers)
		if err != nil {
			return fmt.Errorf("offset %d: %w", rec.Offset, err)
		}
		if wait := time.Until(m.Due); wait > 0 {
			tp := map[string][]int32{rec.Topic: {rec.Partition}}
			cl.PauseFetchPartitions(tp)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			cl.ResumeFetchPartitions(tp)
		}
		storeMax(&rt.lateness, int64(time.Since(m.Due)))
		ev, err := event.Decode(rec.Value)
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		rt.retried.Add(1)
		res, err := rt.engine.Apply(ctx, m.Projection, ev)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && res.Status != projection.StatusFailed {
			cl.MarkCommitRecords(rec)
			rt.retryApplied.Add(1)
			rt.settle(1)
			continue
		}
		fwd, dead, err := rt.topo.forward(rec, m, ev, errText(res, err), time.Now())
		if err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, fwd).FirstErr(); err != nil {
			return fmt.Errorf("produce to %s: %w", fwd.Topic, err)
		}
		cl.MarkCommitRecords(rec)
		if dead {
			rt.deadLettered.Add(1)
			rt.settle(1)
		}
	}
	return nil
}

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// ---- 5. retry topics ----

func (b *bench) retryTopicsRuns(ctx context.Context) error {
	for i, pctv := range b.sizes.RetryTopicsFailRates {
		n := b.sizes.RetryTopics[i]
		run := RetryTopicsRun{FailPct: pctv, Events: n}
		for rep := range b.sizes.Reps {
			phase := fmt.Sprintf("retrytopics%g-r%d", pctv, rep)
			prefix := b.runID + "-" + phase
			topic, nf, err := b.phaseEvents(ctx, phase, prefix, n, pctv)
			if err != nil {
				return err
			}
			topo := newRetryTopology(topic, b.dlqTopic, b.short)
			if ts := topo.topics(); len(ts) > 0 {
				if err := devstack.EnsureTopicsWith(ctx, b.kafka(), int32(b.sizes.Partitions), ts...); err != nil {
					return err
				}
			}
			s0 := b.sample(0)
			st, err := runRetryTopics(ctx, b.kafka(), topo, topic+"-g", b.svc.Engine, n, 10*time.Minute)
			if err != nil {
				return err
			}
			cpu := s0.use(b.sample(0))
			if err := st.check(n, nf, len(topo.delays)); err != nil {
				return fmt.Errorf("%s: %w", phase, err)
			}
			rows, err := b.rowsWithPrefix(ctx, prefix)
			if err != nil {
				return err
			}
			if rows != n-nf {
				return fmt.Errorf("%s: %d rows in bench_rows, want %d (every successful event)", phase, rows, n-nf)
			}
			run.Failing, run.DeadLettered, run.Retried = nf, st.DeadLettered, st.Retried
			run.LatenessMaxS = max(run.LatenessMaxS, st.Lateness.Seconds())
			eps, drain := float64(n)/st.Elapsed.Seconds(), float64(n)/st.Drain.Seconds()
			run.EventsPerSecReps = append(run.EventsPerSecReps, eps)
			run.DrainEventsPerSecReps = append(run.DrainEventsPerSecReps, drain)
			run.CPUReps = append(run.CPUReps, cpu)
			b.progress("  retry topics %g%% rep %d: %.0f events/s (events topic drained at %.0f/s, worst attempt lateness %.3f s); cores used: machine %.2f, consumers+kfake %.2f, postgres %.2f",
				pctv, rep+1, eps, drain, st.Lateness.Seconds(), cpu.MachineBusy, cpu.Bench, cpu.Postgres)
		}
		run.EventsPerSec = median(run.EventsPerSecReps)
		run.DrainEventsPerSec = median(run.DrainEventsPerSecReps)
		b.res.RetryTopics = append(b.res.RetryTopics, run)
		b.progress("retry topics %g%% failing: %.0f events/s (%d dead-lettered after %d delay-topic attempts)", pctv, run.EventsPerSec, run.DeadLettered, run.Retried)
	}
	return nil
}

// retryTopicsNote describes the retry-topics runs.
func (b *bench) retryTopicsNote() string {
	retries := len(b.short.Plan(config.ModeInline).Delays)
	return fmt.Sprintf("Retry topics (Spring Kafka's @RetryableTopic, Uber's reprocessing topics), with franz-go: the main consumer (a group on the run's events topic, one goroutine per partition) applies each polled partition batch in one transaction with the same projection engine, produces each failed (projection, event) pair to the delay topic of attempt 2 and moves on, marking the batch once the produces are acknowledged. "+
		"There is one delay topic per retry of the schedule (%d: <topic>-retry-1 … -retry-%d, %d partitions, created like the events topic), each with a consumer group of its own that joins before the main consumer starts; a delay-topic record carries the attempt, the projection, the due time (its timestamp + the delay) and the original topic, partition and offset in headers. "+
		"A delay consumer pauses a partition whose next record is not yet due (PauseFetchPartitions, then ResumeFetchPartitions when it is), applies the event to that projection, and on failure produces it to the next delay topic or, after attempt %d, to the DLQ topic %q (the peer's DLQ value); each offset is marked after the record is applied or forwarded and acknowledged. "+
		"Events/s is n over first fetched record → last event applied or dead-lettered (so a run with failures includes the last failure's whole schedule); \"drained\" is n over first fetched record → the events topic's last record applied or forwarded. Each run checks every count (applied, forwarded, consumed from the delay topics, dead-lettered) and the rows in bench_rows.",
		retries, retries, b.sizes.Partitions, b.short.MaxAttempts, b.dlqTopic)
}
