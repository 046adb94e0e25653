package relay_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

const (
	publishedTotal = "causet_relay_published_total"
	failuresTotal  = "causet_relay_batch_failures_total"
	lagEvents      = "causet_relay_lag_events"
	lagSeconds     = "causet_relay_lag_seconds"
)

func TestRelayKafkaPublishesOncePerEntityInOrder(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)

	n := l.writeMany(t, 40, 6) // batches of 7 split intents and entities
	rr := start(t, fastOptions(t, l, brokers, topic))
	l.waitAllPublished(t, 30*time.Second)

	recs := topicRecords(t, brokers, topic)
	require.Zero(t, checkTopic(t, recs, l.events()), "one copy of each event")
	require.Len(t, recs, n)
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))

	// Events written while it runs follow the same way.
	n += l.writeMany(t, 10, 3)
	l.waitAllPublished(t, 30*time.Second)
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
	require.Zero(t, rr.metric(t, failuresTotal))
}

// fastRetries make the producer give up on a batch within a second.
var fastRetries = []kgo.Opt{kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }), kgo.MetadataMinAge(20 * time.Millisecond)}

func TestRelayKafkaLagMetrics(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)
	n := l.writeMany(t, 9, 3)
	_, err := l.pool.Exec(ctxFor(t, 10*time.Second), `UPDATE causet_events SET recorded_at = now() - interval '90 seconds'`)
	require.NoError(t, err)

	// A relay that cannot reach Kafka: the batch fails, the rows stay, the
	// lag shows them.
	opts := fastOptions(t, l, []string{"127.0.0.1:1"}, topic)
	opts.KafkaOptions = fastRetries
	down := start(t, opts)
	require.Eventually(t, func() bool { return down.metric(t, failuresTotal) >= 2 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, float64(n), down.metric(t, lagEvents))
	require.GreaterOrEqual(t, down.metric(t, lagSeconds), 90.0)
	require.Less(t, down.metric(t, lagSeconds), 600.0)
	require.Equal(t, n, l.unpublished(t))
	require.Zero(t, down.metric(t, publishedTotal))
	down.stop(t)

	up := start(t, fastOptions(t, l, brokers, topic))
	l.waitAllPublished(t, 30*time.Second)
	require.Zero(t, up.metric(t, lagEvents))
	require.Zero(t, up.metric(t, lagSeconds))
	require.Equal(t, float64(n), up.metric(t, publishedTotal))
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
}

// Two relays on one database: one holds the lock and publishes, the other
// waits, then takes over when the first stops.
func TestRelayKafkaOnlyOnePublishes(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)

	a := start(t, fastOptions(t, l, brokers, topic))
	b := start(t, fastOptions(t, l, brokers, topic))
	n := l.writeMany(t, 30, 5)
	l.waitAllPublished(t, 30*time.Second)
	pa, pb := a.metric(t, publishedTotal), b.metric(t, publishedTotal)
	require.Equal(t, float64(n), pa+pb)
	require.True(t, pa == 0 || pb == 0, "one relay published everything: %v and %v", pa, pb)
	active, standby := a, b
	if pb > 0 {
		active, standby = b, a
	}
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()), "no event sent twice")
	// Both report the backlog, the waiting one too.
	require.Zero(t, standby.metric(t, lagEvents))
	_, reported := metric(t, standby.reg, lagEvents)
	require.True(t, reported)

	active.stop(t)
	m := l.writeMany(t, 12, 4)
	l.waitAllPublished(t, 30*time.Second)
	require.Equal(t, float64(m), standby.metric(t, publishedTotal), "the standby took over")
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
}

// Kafka refusing produce requests: batches fail and are sent again with
// backoff; nothing is marked until Kafka acknowledges; writers go on.
func TestRelayKafkaRefusedThenBack(t *testing.T) {
	l := newLedger(t)
	cluster := testenv.KafkaCluster(t)
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)

	fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	opts := fastOptions(t, l, brokers, topic)
	opts.KafkaOptions = fastRetries
	rr := start(t, opts)
	n := l.writeMany(t, 10, 3)
	require.Eventually(t, func() bool { return rr.metric(t, failuresTotal) >= 3 }, 30*time.Second, 10*time.Millisecond)
	n += l.writeMany(t, 5, 3) // intents are not held up by the outage
	require.Equal(t, n, l.unpublished(t))
	require.Equal(t, float64(n), rr.metric(t, lagEvents))
	require.Nil(t, topicRecords(t, brokers, topic))

	fault.Remove()
	l.waitAllPublished(t, 30*time.Second)
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
}

// Kafka cutting the connection on every produce request: the records were
// sent, so the idempotent producer keeps them until an answer comes. A relay
// stopped meanwhile returns after its shutdown grace, having marked nothing;
// once Kafka answers, the next relay publishes everything.
func TestRelayKafkaConnectionCutThenBack(t *testing.T) {
	l := newLedger(t)
	cluster := testenv.KafkaCluster(t)
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)

	var down atomic.Bool
	down.Store(true)
	var cut atomic.Int32
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			cluster.DropControl()
			return nil, nil, false
		}
		cluster.KeepControl()
		cut.Add(1)
		return nil, errors.New("broker down"), true
	})
	n := l.writeMany(t, 10, 3)
	opts := fastOptions(t, l, brokers, topic)
	opts.ShutdownGrace = 500 * time.Millisecond
	opts.KafkaOptions = fastRetries // a cut connection waits for a metadata refresh
	first := start(t, opts)
	require.Eventually(t, func() bool { return cut.Load() >= 3 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, n, l.unpublished(t))
	began := time.Now()
	first.stop(t)
	require.Less(t, time.Since(began), 5*time.Second, "Run returns after the shutdown grace")
	require.Equal(t, n, l.unpublished(t))
	require.Zero(t, first.metric(t, publishedTotal))

	opts = fastOptions(t, l, brokers, topic)
	opts.KafkaOptions = fastRetries
	second := start(t, opts)
	require.Eventually(t, func() bool { return cut.Load() >= 6 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, n, l.unpublished(t))
	down.Store(false)
	l.waitAllPublished(t, 60*time.Second)
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
	require.Equal(t, float64(n), second.metric(t, publishedTotal))
}

// PostgreSQL stopping under the relay (its connection and lock gone): it
// reconnects with backoff, takes the lock again and goes on.
func TestRelayKafkaDatabaseRestart(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)

	rr := start(t, fastOptions(t, l, brokers, topic))
	n := l.writeMany(t, 10, 3)
	l.waitAllPublished(t, 30*time.Second)
	testenv.StopPostgres(t)
	time.Sleep(300 * time.Millisecond)
	testenv.StartPostgres(t)
	require.Eventually(t, func() bool { return l.pool.Ping(ctxFor(t, time.Second)) == nil }, 30*time.Second, 50*time.Millisecond)
	n += l.writeMany(t, 10, 3)
	l.waitAllPublished(t, 30*time.Second)
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()))
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
}

// An event Kafka refuses for itself (too large for the topic) is set aside
// with the reason: every other event, before and after it, its own
// entity's included, is published once, in order, and the relay goes on.
func TestRelayKafkaSetsAsidePoisonEvent(t *testing.T) {
	l := newLedger(t)
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "causet.events.v1")
	limit := "4096"
	testenv.CreateTopicWithConfig(t, brokers, topic, 3, map[string]*string{"max.message.bytes": &limit})

	ctx := ctxFor(t, time.Minute)
	n := l.writeMany(t, 20, 4)
	require.NoError(t, l.writeSized(ctx, "main", "e-1", 1, 20_000))
	poison := l.events()[len(l.events())-1]
	n += l.writeMany(t, 20, 4)
	rr := start(t, fastOptions(t, l, brokers, topic))
	require.Eventually(t, func() bool { return l.unpublished(t) == 1 && rr.metric(t, "causet_relay_set_aside_events") == 1 },
		30*time.Second, 20*time.Millisecond, "every event published but the poison one, which is set aside")

	var reason string
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT reason FROM causet_events_set_aside WHERE event_id = $1`, poison.EventID).Scan(&reason))
	require.Contains(t, reason, "MESSAGE_TOO_LARGE")
	require.Equal(t, 1.0, rr.metric(t, "causet_relay_set_aside_total"))
	require.Zero(t, rr.metric(t, lagEvents), "the backlog does not count it")
	recs := topicRecords(t, brokers, topic)
	require.Len(t, recs, n, "the others, each once")
	last := map[string]int64{}
	for _, rec := range recs {
		env, err := event.Decode(rec.Value)
		require.NoError(t, err)
		require.NotEqual(t, poison.EventID, env.EventID)
		key := env.ForkID + "/" + env.EntityID
		require.Greater(t, env.Sequence, last[key], "%s in order", key)
		last[key] = env.Sequence
	}
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
}

// hookOnSequence runs before a record of one sequence is buffered, and tells
// when a record of another is answered with an error.
type hookOnSequence struct {
	before  int64
	blocked func()
	failed  int64
	failure chan struct{}
	once    sync.Once
}

func (h *hookOnSequence) OnProduceRecordBuffered(rec *kgo.Record) {
	if env, err := event.Decode(rec.Value); err == nil && env.Sequence == h.before {
		h.once.Do(h.blocked)
	}
}

func (h *hookOnSequence) OnProduceRecordUnbuffered(rec *kgo.Record, err error) {
	if env, derr := event.Decode(rec.Value); derr == nil && env.Sequence == h.failed && err != nil {
		select {
		case <-h.failure:
		default:
			close(h.failure)
		}
	}
}

// A broker refuses a whole partition batch for one record too large; the
// rows of the same entity refused with it are judged again alone, and no
// later row of the entity may reach Kafka first. The schedule a loaded
// machine produces is forced here: the answer to the refused batch arrives
// before the relay hands the next row of the entity to the producer.
func TestRelayKafkaKeepsEntityOrderAroundPoisonEvent(t *testing.T) {
	l := newLedger(t)
	c := testenv.KafkaCluster(t)
	brokers := c.ListenAddrs()
	topic := testenv.Topic(t, "causet.events.v1")
	limit := "4096"
	testenv.CreateTopicWithConfig(t, brokers, topic, 1, map[string]*string{"max.message.bytes": &limit})

	ctx := ctxFor(t, time.Minute)
	require.NoError(t, l.write(ctx, "main", "e-1", 1))
	require.NoError(t, l.writeSized(ctx, "main", "e-1", 1, 20_000))
	require.NoError(t, l.write(ctx, "main", "e-1", 1))

	// The producer ID waits until the first two rows are buffered, so
	// that they go out in one batch.
	buffered := make(chan struct{})
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() {
			select {
			case <-buffered:
			case <-time.After(5 * time.Second):
			}
		})
		return nil, nil, false
	})
	hook := &hookOnSequence{before: 3, failed: 2, failure: make(chan struct{})}
	hook.blocked = func() {
		close(buffered)
		select {
		case <-hook.failure:
		case <-time.After(3 * time.Second):
		}
	}
	opts := fastOptions(t, l, brokers, topic)
	opts.KafkaOptions = []kgo.Opt{kgo.WithHooks(hook)}
	rr := start(t, opts)
	require.Eventually(t, func() bool { return l.unpublished(t) == 1 && rr.metric(t, "causet_relay_set_aside_events") == 1 },
		30*time.Second, 20*time.Millisecond, "both small rows published, the poison one set aside")

	var seqs []int64
	for _, rec := range topicRecords(t, brokers, topic) {
		env, err := event.Decode(rec.Value)
		require.NoError(t, err)
		seqs = append(seqs, env.Sequence)
	}
	require.Equal(t, []int64{1, 3}, seqs, "the entity's rows in order, each once")
}
