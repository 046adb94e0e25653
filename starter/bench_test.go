package starter

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/testenv"
)

// Benchmarks of the bridge against real PostgreSQL, the Temporal dev server
// and kfake (or KAFKA_BROKERS). Each iteration pre-produces a fixed number
// of events to a fresh topic, then times one bridge from start until every
// event is done: in inline mode until every offset is committed (effects
// written, failures' workflows started); in workflow mode until every effect
// is in PostgreSQL (a worker runs the workflows), since that is when an event
// is applied in that mode. Run them together:
//
//	go test -run '^$' -bench 'BenchmarkBridge' -benchtime 1x ./starter/
//
// and compare the events/s figures. BENCH_EVENTS sets the inline
// benchmarks' events per iteration (default 30000; startup weighs less
// with more) and BENCH_MAX_POLL_RECORDS the bridge's batch bound (default
// DefaultMaxPollRecords).

var benchInline = func() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_EVENTS")); err == nil {
		return n
	}
	return 30000
}()

const (
	benchPartitions = 3
	benchWorkflow   = 600
)

// benchEvents returns n TRACK_PLAYED records over the partitions (entity
// keyed), every 1/failEvery of them failing with division by zero
// (failEvery 0: none), and how many fail. Event IDs start with prefix:
// workflow IDs are per event, and the dev server is shared by every
// benchmark of the binary.
func benchEvents(prefix string, round, n, failEvery int) ([]*kgo.Record, int) {
	recs := make([]*kgo.Record, 0, n)
	failing := 0
	for i := range n {
		p := int32(i % benchPartitions)
		days := 1
		artist := fmt.Sprintf("artist-p%d-%d", p, i%50)
		if failEvery > 0 && i%failEvery == failEvery-1 {
			days = 0
			failing++
			artist = fmt.Sprintf("artist-f%d-%d", round, i) // blocks a key of its own
		}
		recs = append(recs, envRecord(p, played(fmt.Sprintf("%s-r%d-%d", prefix, round, i), artist, 1, days)))
	}
	return recs, failing
}

// benchRound points the harness at a fresh topic and group, produces recs,
// runs a bridge until done() and returns the elapsed time.
func benchRound(b *testing.B, h *harness, o Options, recs []*kgo.Record, done func(*running) bool) time.Duration {
	b.Helper()
	b.StopTimer()
	h.topic = testenv.Topic(b, "bench")
	h.group = testenv.Topic(b, "group")
	testenv.CreateTopic(b, h.brokers, h.topic, benchPartitions)
	for i := range recs {
		recs[i].Topic = h.topic
	}
	for i := 0; i < len(recs); i += 5000 {
		h.produce(recs[i:min(i+5000, len(recs))]...)
	}
	o.Topic, o.Group = h.topic, h.group
	o.Registerer = nil
	b.StartTimer()
	start := time.Now()
	r := h.start(o)
	for !done(r) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	r.stop(b)
	return elapsed
}

// committedAll reports whether the bridge committed every partition to n/partitions.
func committedAll(h *harness, n int) func(*running) bool {
	per := int64(n / benchPartitions)
	return func(r *running) bool {
		for p := range benchPartitions {
			if value(r.b.m.committed.WithLabelValues(h.topic, fmt.Sprint(p))) < float64(per) {
				return false
			}
		}
		return true
	}
}

// BenchmarkBridgeInline compares ordering entity (the default) with none,
// at 0% and 1% failing, in the same run. A failing event has an entity of
// its own, so with ordering entity it blocks only its key.
func BenchmarkBridgeInline(b *testing.B) {
	for _, tc := range []struct {
		name      string
		ordering  config.Ordering
		failEvery int
	}{
		{"ordering=none/fail=0%", config.OrderingNone, 0},
		{"ordering=entity/fail=0%", config.OrderingEntity, 0},
		{"ordering=none/fail=1%", config.OrderingNone, 100},
		{"ordering=entity/fail=1%", config.OrderingEntity, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, harnessOptions{partitions: 1})
			h.startWorker() // the retry workflows of failures run
			o := h.options(nil)
			o.Ordering = tc.ordering
			if n, err := strconv.Atoi(os.Getenv("BENCH_MAX_POLL_RECORDS")); err == nil {
				o.MaxPollRecords = n
			}
			o.Logger = h.logger
			var total time.Duration
			for round := range b.N {
				recs, failing := benchEvents(h.taskQueue, round, benchInline, tc.failEvery)
				total += benchRound(b, h, o, recs, committedAll(h, benchInline))
				_ = failing
			}
			b.ReportMetric(float64(benchInline*b.N)/total.Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func BenchmarkBridgeWorkflowMode(b *testing.B) {
	h := newHarness(b, harnessOptions{partitions: 1})
	h.startWorker()
	o := h.options(nil)
	o.Mode = config.ModeWorkflow
	var total time.Duration
	for round := range b.N {
		recs, _ := benchEvents(h.taskQueue, round, benchWorkflow, 0)
		base := h.count(`SELECT count(*) FROM causet_projection_applied`)
		deadline := time.Now().Add(3 * time.Minute)
		total += benchRound(b, h, o, recs, func(r *running) bool {
			if time.Now().After(deadline) {
				if f := os.Getenv("BRIDGE_TEST_LOG"); f != "" {
					_ = os.WriteFile(f, []byte(h.logs.String()), 0o644)
				}
				b.Fatalf("workflow mode: %d of %d applied after 3 minutes (handed off %v)", h.count(`SELECT count(*) FROM causet_projection_applied`)-base,
					benchWorkflow, value(r.b.m.handedOff.WithLabelValues("workflow")))
			}
			return h.count(`SELECT count(*) FROM causet_projection_applied`) >= base+benchWorkflow
		})
	}
	require.Equal(b, benchWorkflow*b.N, h.count(`SELECT count(*) FROM causet_projection_applied`))
	b.ReportMetric(float64(benchWorkflow*b.N)/total.Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
}
