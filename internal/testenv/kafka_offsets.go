package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// offsetsTimeout bounds one read of committed or end offsets.
const offsetsTimeout = 10 * time.Second

// kafkaAdmin returns an admin client on brokers, closed by the returned func.
func kafkaAdmin(t testing.TB, brokers []string) (*kadm.Client, func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	return kadm.NewClient(cl), cl.Close
}

// CommittedOffsets returns the offsets group has committed on topic, per
// partition. A group that has committed nothing, or offsets that cannot be
// read (the broker is down, say), give an empty map.
func CommittedOffsets(t testing.TB, brokers []string, group, topic string) map[int32]int64 {
	t.Helper()
	adm, closeFn := kafkaAdmin(t, brokers)
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), offsetsTimeout)
	defer cancel()
	out := map[int32]int64{}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return out
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// EndOffsets returns topic's end offset (the offset its next record will
// get) per partition; the test fails if they cannot be listed.
func EndOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	adm, closeFn := kafkaAdmin(t, brokers)
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), offsetsTimeout)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("testenv: end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// CommittedToEnd reports whether group has committed every partition of
// topic up to its end.
func CommittedToEnd(t testing.TB, brokers []string, group, topic string) bool {
	t.Helper()
	ends := EndOffsets(t, brokers, topic)
	committed := CommittedOffsets(t, brokers, group, topic)
	for p, end := range ends {
		if committed[p] != end {
			return false
		}
	}
	return true
}

// WaitCommittedToEnd polls CommittedToEnd (ends read again each time)
// until it holds or within has passed, and reports whether it held.
func WaitCommittedToEnd(t testing.TB, brokers []string, group, topic string, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if CommittedToEnd(t, brokers, group, topic) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RequireCommittedToEnd is WaitCommittedToEnd that fails the test, with
// the end and committed offsets, when within passes first.
func RequireCommittedToEnd(t testing.TB, brokers []string, group, topic string, within time.Duration) {
	t.Helper()
	if !WaitCommittedToEnd(t, brokers, group, topic, within) {
		t.Fatalf("testenv: group %s has not committed %s to its end within %s: ends %v, committed %v",
			group, topic, within, EndOffsets(t, brokers, topic), CommittedOffsets(t, brokers, group, topic))
	}
}
