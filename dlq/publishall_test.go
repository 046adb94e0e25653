package dlq

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PublishAll writes every record in one produce, says where each landed,
// and keeps the order of one key's records; on a topic that is not there
// it fails each record, writing none.
func TestPublishAllWritesEachRecordAndSaysWhere(t *testing.T) {
	const topic = "causet.projection-dlq.v1"
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	defer kafka.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	p := &Publisher{Client: cl, Topic: topic}
	var rs []Keyed
	for i := range 30 {
		ev := json.RawMessage(fmt.Sprintf(`{"eventId":"e%d","eventType":"A","entityId":"u%d","forkId":"f","payload":{}}`, i, i%3))
		rs = append(rs, Keyed{Key: fmt.Appendf(nil, "u%d", i%3), Record: Record{Event: &ev, ProjectionName: "p", ForkID: "f",
			Error: "boom", ErrorKind: "sql", DeadLetteredAt: time.Now()}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at, errs := p.PublishAll(ctx, rs)
	last := map[string]int64{} // key -> offset of its latest record
	for i := range rs {
		require.NoError(t, errs[i])
		require.Equal(t, topic, at[i].Topic)
		k := fmt.Sprintf("%s@%d", rs[i].Key, at[i].Partition)
		if prev, ok := last[k]; ok {
			require.Greater(t, at[i].Offset, prev, "a key's records land in the order given")
		}
		last[k] = at[i].Offset
	}
	read, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer read.Close()
	got := 0
	for got < len(rs) {
		fs := read.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			d, err := Decode(r.Value)
			require.NoError(t, err)
			require.Equal(t, "boom", d.Error)
			got++
		})
	}
	require.Equal(t, len(rs), got)

	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	missing := &Publisher{Client: cl, Topic: "not-there"}
	at, errs = missing.PublishAll(short, rs[:2])
	for i := range 2 {
		require.Error(t, errs[i], "record %d", i)
		require.Contains(t, errs[i].Error(), "not-there")
		require.Empty(t, at[i].Topic)
	}
}
