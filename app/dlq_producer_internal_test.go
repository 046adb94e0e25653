package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

// The worker's dead-letter producer fails a record it could not write
// within dlq.WriteWindow, even once its request is on a connection that
// never answers, and does not write it after the peer answers again: the
// window a retried PublishDeadLetter waits out is a bound on when an
// earlier attempt's record can land. A producer without the window waits
// on the silent connection, then writes the record on a new one once the
// peer serves it: late, after a retry may have written its own.
func TestDeadLetterProducerFailsARecordPastItsWindowBehindAHungPeerKafka(t *testing.T) {
	c, peer := testenv.KafkaBehindHungPeer(t)
	const topic = "causet.projection-dlq.v1"
	testenv.CreateTopic(t, c.ListenAddrs(), topic, 1)

	cfg := config.Config{KafkaBrokers: c.ListenAddrs(), DLQTopic: topic}
	s := &Service{Config: cfg, Logger: slog.Default()}
	producer, err := s.DLQProducer()
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	pub := &dlq.Publisher{Client: producer, Topic: topic}
	ctx := context.Background()
	_, err = pub.Publish(ctx, []byte("k"), dlq.Record{EventType: "before", DeadLetteredAt: time.Now()})
	require.NoError(t, err)

	peer.Hang()
	started := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := pub.Publish(ctx, []byte("k"), dlq.Record{EventType: "during", DeadLetteredAt: started})
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "nothing can be written while the peer is hung")
		require.True(t, errors.Is(err, kgo.ErrRecordTimeout), "failed for its window: %v", err)
		t.Logf("the record failed %s after its time", time.Since(started).Round(100*time.Millisecond))
	case <-time.After(dlq.WriteWindow + 40*time.Second):
		t.Fatal("the produce still waits on the hung peer well past its window")
	}

	peer.Answer()
	// Past the request deadlines of any retry the producer could still
	// have made, the topic holds the first record only.
	_, err = pub.Publish(ctx, []byte("k"), dlq.Record{EventType: "after", DeadLetteredAt: time.Now()})
	require.NoError(t, err, "the producer writes again once the peer answers")
	time.Sleep(5 * time.Second)
	reader, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))
	require.NoError(t, err)
	defer reader.Close()
	var types []string
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(types) < 2 {
		fs := reader.PollFetches(fctx)
		require.NoError(t, fctx.Err(), "read %v", types)
		fs.EachRecord(func(r *kgo.Record) {
			rec, err := dlq.Decode(r.Value)
			require.NoError(t, err)
			types = append(types, rec.EventType)
		})
	}
	poll, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	reader.PollFetches(poll).EachRecord(func(r *kgo.Record) { types = append(types, "more") })
	require.Equal(t, []string{"before", "after"}, types, "the failed record was never written")
}
