package starter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// slowStarter takes a while per start and records the peak concurrency.
type slowStarter struct {
	delay     time.Duration
	cur, peak atomic.Int64
	mu        sync.Mutex
	ids       map[string]bool
}

func (s *slowStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	s.ids[o.ID] = true
	s.mu.Unlock()
	return nil, nil
}

// TestBridgeKafkaMaxInflightBound: hand-offs run concurrently, never more
// than MaxInflight at once, and every one completes before its offset commits.
// The engine is a fake that fails every event, so this needs only Kafka.
func TestBridgeKafkaMaxInflightBound(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "events")
	testenv.CreateTopic(t, brokers, topic, 3)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer producer.Close()
	const n = 300
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, envRecord(int32(i%3), followed(fmt.Sprintf("ev-%d", i), fmt.Sprintf("user-%d", i), "a")))
	}
	require.NoError(t, producer.ProduceSync(context.Background(), recs...).FirstErr())

	engine := EngineFunc{
		ProjectionsFunc: func(string) []string { return []string{"artist_followers"} },
		ApplyBatchFunc: func(_ context.Context, evs []event.Envelope) ([]projection.Result, error) {
			out := make([]projection.Result, len(evs))
			for i := range evs {
				out[i] = projection.Result{Projection: "artist_followers", IRVersion: 1, Index: i, Status: projection.StatusFailed, Err: &projection.ApplyError{Kind: "sql", Err: errors.New("boom")}}
			}
			return out, nil
		},
	}
	s := &slowStarter{delay: 10 * time.Millisecond, ids: map[string]bool{}}
	b, err := New(Options{
		Brokers: brokers, Topic: topic, Group: testenv.Topic(t, "group"), DLQTopic: testenv.Topic(t, "dlq"),
		Engine: engine, Starter: s, MaxInflight: 8, MaxPollRecords: 50, CommitInterval: 50 * time.Millisecond,
		Registerer: prometheus.NewRegistry(),
		Ordering:   config.OrderingNone, // plain concurrent hand-offs
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	require.Eventually(t, func() bool {
		for p := range 3 {
			if value(b.m.committed.WithLabelValues(topic, fmt.Sprint(p))) != n/3 {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Len(t, s.ids, n, "every failure handed off before its offset was committed")
	require.LessOrEqual(t, s.peak.Load(), int64(8), "never more than MaxInflight starts at once")
	require.GreaterOrEqual(t, s.peak.Load(), int64(4), "starts run concurrently, not one at a time")
	require.EqualValues(t, n, value(b.m.handedOff.WithLabelValues("inline")))
	require.Zero(t, value(b.m.inflight))
}
