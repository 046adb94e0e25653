package testenv_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestOffsetsKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, group := testenv.Topic(t, "offsets"), testenv.Topic(t, "group")
	testenv.CreateTopic(t, brokers, topic, 2)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx(t),
		&kgo.Record{Partition: 0, Value: []byte("a")},
		&kgo.Record{Partition: 0, Value: []byte("b")},
		&kgo.Record{Partition: 1, Value: []byte("c")},
	).FirstErr())

	require.Equal(t, map[int32]int64{0: 2, 1: 1}, testenv.EndOffsets(t, brokers, topic))
	require.Empty(t, testenv.CommittedOffsets(t, brokers, group, topic), "nothing committed yet")
	require.False(t, testenv.CommittedToEnd(t, brokers, group, topic))
	require.False(t, testenv.WaitCommittedToEnd(t, brokers, group, topic, 200*time.Millisecond))

	commit := func(p int32, at int64) {
		var o kadm.Offsets
		o.AddOffset(topic, p, at, -1)
		resp, err := kadm.NewClient(cl).CommitOffsets(ctx(t), group, o)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
	}
	commit(0, 2)
	require.Equal(t, map[int32]int64{0: 2}, testenv.CommittedOffsets(t, brokers, group, topic))
	require.False(t, testenv.CommittedToEnd(t, brokers, group, topic), "partition 1 is not committed")
	go func() {
		time.Sleep(300 * time.Millisecond)
		commit(1, 1)
	}()
	testenv.RequireCommittedToEnd(t, brokers, group, topic, 30*time.Second)
	require.True(t, testenv.CommittedToEnd(t, brokers, group, topic))
	require.Empty(t, testenv.CommittedOffsets(t, brokers, group, "another-topic"))
}
