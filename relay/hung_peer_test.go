package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// A peer in front of the relay's PostgreSQL (a pooler, a database proxy)
// stops answering while intents are recorded: the relay's connection stays
// open and acknowledged but silent for good, and new connections are
// served again after 40 s. The relay's statements have deadlines of their
// own (dbTimeout), so it leaves the silent connection, connects again once
// new connections are answered, and publishes everything recorded
// meanwhile within 30 s, once each, in order.
func TestRelayKafkaCatchesUpAfterAHungDatabaseProxy(t *testing.T) {
	const hangFor = 40 * time.Second
	l := newLedger(t)
	brokers, topic := eventsTopic(t)
	pool, peer := testenv.PoolBehindHungPeer(t, ctxFor(t, 5*time.Minute), l.pool, 2*time.Second)
	opts := fastOptions(t, l, brokers, topic)
	opts.Pool = pool
	rr := start(t, opts)

	n := l.writeMany(t, 20, 5)
	l.waitAllPublished(t, 30*time.Second)

	peer.Hang()
	hungAt := time.Now()
	// The write path records intents on its own link throughout.
	for time.Since(hungAt) < hangFor {
		n += l.writeMany(t, 4, 5)
		time.Sleep(time.Second)
	}
	require.Positive(t, l.unpublished(t), "nothing is published through the hung peer")
	peer.Answer()
	answered := time.Now()
	l.waitAllPublished(t, 30*time.Second)
	t.Logf("%d events; every one published %.1f s after the peer served new connections again", n, time.Since(answered).Seconds())
	require.Zero(t, checkTopic(t, topicRecords(t, brokers, topic), l.events()), "nothing published twice")
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
}

// The same peer in front of the broker: the relay's produce requests go
// unanswered for 40 s on connections that stay open, while intents are
// recorded. The produce request's deadline (ProducerRequestTimeout) ends
// each silent connection, so nothing waits on it for good: once new
// connections are answered the relay publishes everything recorded
// meanwhile within 30 s, each event in order, a re-send at most repeating
// the same bytes.
func TestRelayKafkaCatchesUpAfterAHungKafkaProxy(t *testing.T) {
	const hangFor = 40 * time.Second
	l := newLedger(t)
	cluster, peer := testenv.KafkaBehindHungPeer(t)
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)
	rr := start(t, fastOptions(t, l, brokers, topic))

	n := l.writeMany(t, 20, 5)
	l.waitAllPublished(t, 30*time.Second)

	peer.Hang()
	hungAt := time.Now()
	for time.Since(hungAt) < hangFor {
		n += l.writeMany(t, 4, 5)
		time.Sleep(time.Second)
	}
	require.Positive(t, l.unpublished(t), "nothing is published through the hung peer")
	peer.Answer()
	answered := time.Now()
	l.waitAllPublished(t, 30*time.Second)
	t.Logf("%d events; every one published %.1f s after the peer served new connections again", n, time.Since(answered).Seconds())
	resends := checkTopic(t, topicRecords(t, brokers, topic), l.events())
	t.Logf("%d re-sends (a batch whose answer the hang swallowed)", resends)
	require.Equal(t, float64(n), rr.metric(t, publishedTotal))
}
