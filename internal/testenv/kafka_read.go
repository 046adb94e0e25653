package testenv

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadTopic reads topic from its start up to the end offsets it has when
// called and returns the records in partition then offset order, with the
// errors fetches reported on the way (the client goes on after them). The
// test fails if ctx ends first. opts add to the client's options.
func ReadTopic(t testing.TB, ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, []error) {
	t.Helper()
	ends := EndOffsets(t, brokers, topic)
	starts := map[int32]kgo.Offset{}
	total := int64(0)
	for p, e := range ends {
		total += e
		starts[p] = kgo.NewOffset().AtStart()
	}
	if total == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts})}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	var errs []error
	seen := map[int32]int64{}
	for {
		done := true
		for p, e := range ends {
			if seen[p] < e {
				done = false
			}
		}
		if done {
			break
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("testenv: reading %s: %v (read %d of %d records; fetch errors: %v)", topic, ctx.Err(), len(recs), total, errs)
		}
		fs.EachError(func(_ string, _ int32, err error) { errs = append(errs, err) })
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset + 1
			if r.Offset < ends[r.Partition] {
				recs = append(recs, r)
			}
		})
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	return recs, errs
}

// FirstRecords polls topic from its start until a fetch brings records and
// returns them; the test fails if none comes within.
func FirstRecords(t testing.TB, ctx context.Context, brokers []string, topic string, within time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	fctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		fs := cl.PollFetches(fctx)
		if fctx.Err() != nil {
			t.Fatalf("testenv: no record on %s within %s: %v", topic, within, fctx.Err())
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs
		}
	}
}
