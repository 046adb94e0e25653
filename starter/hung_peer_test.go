package starter

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// A peer in front of PostgreSQL (a pooler, a database proxy, a load
// balancer that lost its flows) stops answering while events flow: the
// connections it holds stay open and acknowledged but silent for good, and
// new ones are served again after hangFor. The bridge pauses through it as
// through any outage, dead-letters nothing, and catches up within 30 s of
// new connections being answered. Its in-flight transactions, which no TCP
// timeout ends, are ended once the database answers new connections, when
// one is in flight as the peer hangs: whether one is depends on the moment
// (between two batches, the next try's ping or dial fails within 2 s), so
// it is logged here; TestRetrierEndsTriesOnSilentConnections proves it.
func TestBridgeKafkaCatchesUpAfterAHungDatabaseProxy(t *testing.T) {
	const hangFor = 20 * time.Second
	h, o := orderedHarness(t, 2)
	pool, peer := testenv.PoolBehindHungPeer(t, h.ctx, h.pool, 2*time.Second)
	engine, err := projection.NewEngine(h.ctx, pool, h.logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	probeCfg := pool.Config().ConnConfig.Copy()
	o.Engine, o.Parking = engine, parking.NewStore(pool)
	o.Probe = func(ctx context.Context) error {
		conn, err := pgx.ConnectConfig(ctx, probeCfg.Copy())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.Ping(ctx)
	}
	o.ProbeTimeout = 2 * time.Second
	h.start(o)

	// Events flow on 20 keys, 2 partitions, all through the hang.
	const keys, perKey = 20, 40
	_, done := h.produceRounds(t, "hung", keys, perKey)
	applied := func() int {
		return h.count(`SELECT count(*) FROM stats_audit WHERE artist_id LIKE $1`, h.prefix+"hung%")
	}
	require.Eventually(t, func() bool { return applied() >= 5*keys }, time.Minute, 100*time.Millisecond, "applies before the hang")

	peer.Hang()
	hungAt := applied()
	time.Sleep(hangFor)
	peer.Answer()
	t.Logf("applied %d when the proxy hung, %d when it answered again", hungAt, applied())
	answered := time.Now()
	<-done
	require.Eventually(t, func() bool { return applied() == keys*perKey }, 30*time.Second+time.Until(answered.Add(time.Duration(perKey)*time.Second)),
		200*time.Millisecond, "caught up within 30 s of the proxy answering (and of the last event): %d of %d", applied(), keys*perKey)
	t.Logf("caught up %.1f s after the proxy answered new connections", time.Since(answered).Seconds())
	h.requireAppliedOnceInOrder(t, "hung", keys, perKey)
	require.Empty(t, h.dlqRecordsNow(), "nothing dead-lettered")
	require.Empty(t, h.workflowsOnQueue(), "no event handed to Temporal")
	t.Logf("tries ended by the watch on a silent connection: %d", strings.Count(h.logs.String(), "silent connection"))
}

// The same peer in front of Kafka, between the bridge and the broker:
// the bridge's fetches, commits and group heartbeats go silent for
// hangFor while the producers (elsewhere) go on, then new connections are
// served while the old ones stay silent. The bridge rejoins its group and
// catches up with the backlog within 30 s, each event applied once, in
// order, nothing handed to Temporal.
func TestBridgeKafkaCatchesUpAfterAHungKafkaProxy(t *testing.T) {
	const hangFor = 40 * time.Second
	cluster, peer := testenv.KafkaBehindHungPeer(t)
	h, o := orderedHarness(t, 2)
	h.moveTo(cluster.ListenAddrs(), 2, peer.Bypass())
	o.Brokers = h.brokers
	h.start(o)

	const keys, perKey = 20, 60
	produced, done := h.produceRounds(t, "khung", keys, perKey)
	applied := func() int {
		return h.count(`SELECT count(*) FROM stats_audit WHERE artist_id LIKE $1`, h.prefix+"khung%")
	}
	require.Eventually(t, func() bool { return applied() >= 5*keys }, time.Minute, 100*time.Millisecond, "applies before the hang")

	peer.Hang()
	hungAt := applied()
	time.Sleep(hangFor)
	peer.Answer()
	answered := time.Now()
	t.Logf("applied %d when the proxy hung, %d of %d produced when it answered again", hungAt, applied(), produced())
	require.Eventually(t, func() bool { return applied() >= produced()-keys }, 30*time.Second, 200*time.Millisecond,
		"caught up with the backlog within 30 s of the proxy answering: %d of %d", applied(), produced())
	t.Logf("caught up with the backlog %.1f s after the proxy answered new connections", time.Since(answered).Seconds())
	<-done
	require.Eventually(t, func() bool { return applied() == keys*perKey }, 30*time.Second, 200*time.Millisecond,
		"every event applied: %d of %d", applied(), keys*perKey)
	h.requireAppliedOnceInOrder(t, "khung", keys, perKey)
	require.Empty(t, h.workflowsOnQueue(), "no event handed to Temporal")
}

// produceRounds produces, on keys artists named tag0, tag1…, perKey rounds
// of one sequenced event per key a second apart, on two partitions; done
// closes after the last, and produced counts what was produced so far.
func (h *harness) produceRounds(t *testing.T, tag string, keys, perKey int) (produced func() int, done <-chan struct{}) {
	var n atomic.Int32
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for round := 1; round <= perKey; round++ {
			for k := range keys {
				a := fmt.Sprintf("%s%s%d", h.prefix, tag, k)
				if err := h.producer.ProduceSync(h.ctx, envRecord(int32(k%2), sequenced(nth(h, a, round), int64(round)))).FirstErr(); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
			time.Sleep(time.Second)
		}
	}()
	return func() int { return int(n.Load()) }, ch
}

// requireAppliedOnceInOrder requires every key of produceRounds to have
// its perKey events applied once each, in sequence order.
func (h *harness) requireAppliedOnceInOrder(t *testing.T, tag string, keys, perKey int) {
	t.Helper()
	for k := range keys {
		a := fmt.Sprintf("%s%s%d", h.prefix, tag, k)
		got := h.audit(a)
		require.Len(t, got, perKey, a)
		for i, v := range got {
			require.EqualValues(t, i+1, v, "%s applied once each, in order: %v", a, got)
		}
	}
}
