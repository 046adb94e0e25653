package starter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/workflows"
)

// laneQueue queries the length of a lane's queue (-1 when it cannot).
func (h *harness) laneQueue(id string) int {
	v, err := h.temporal.Client.QueryWorkflow(h.ctx, id, "", contract.QueryLaneStatus)
	if err != nil {
		return -1
	}
	var st workflows.LaneStatus
	if v.Get(&st) != nil {
		return -1
	}
	return st.QueueLength
}

// A lane at CAUSET_LANE_MAX_QUEUED refuses more; the bridge keeps the
// key's events and holds the partition, and once the head settles every
// event applies, in order, none dropped.
func TestBridgeKafkaOrderingLaneBoundHoldsThePartition(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.LaneMaxQueued = 5
	r := h.start(o)
	const artist = "artist-hot"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 40; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)

	lane := contract.LaneWorkflowID("artist_stats", "production", artist)
	require.Eventually(t, func() bool { return value(r.b.m.laneFull) > 0 }, 60*time.Second, 50*time.Millisecond,
		"the lane refuses past its bound")
	require.LessOrEqual(t, h.laneQueue(lane), 5, "the lane holds at most its bound")
	require.Empty(t, h.audit(artist), "nothing of the key runs before its head")
	h.produce(envRecord(0, played(h.prefix+"after", "artist-after", 1, 1)))
	time.Sleep(2 * time.Second)
	require.Zero(t, h.count(`SELECT count(*) FROM artist_stats WHERE artist_id = 'artist-after'`),
		"the partition is held behind the full lane, not skipped past it")

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 40 }, 120*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 40), h.audit(artist), "every event applied once, in order")
	h.waitCommittedToEnd(60 * time.Second)
	require.Equal(t, 1, h.count(`SELECT count(*) FROM artist_stats WHERE artist_id = 'artist-after'`))
}

// A lane terminated from outside while events wait in it loses nothing:
// the bridge alerts, sends the events it never started to a new lane run,
// in order, and the key is unblocked only once they have run.
func TestBridgeKafkaOrderingTerminatedLaneRedelivers(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.Retry.MaxAttempts = 60 // the head retries until the test lets it succeed
	r := h.start(o)
	const artist = "artist-term"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 8; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)

	lane := contract.LaneWorkflowID("artist_stats", "production", artist)
	require.Eventually(t, func() bool { return h.laneQueue(lane) >= 6 }, 60*time.Second, 50*time.Millisecond,
		"the key's later events wait in its lane behind the head (event 2 waits for it, 3 to 8 are queued)")
	require.NoError(t, h.temporal.Client.TerminateWorkflow(h.ctx, lane, "", "terminated by an operator (test)"))
	require.Eventually(t, func() bool { return value(r.b.m.lanesLost) == 1 }, 60*time.Second, 100*time.Millisecond,
		"the bridge notices the lost lane")
	lines := h.logs.lines("projection_lane_lost")
	require.NotEmpty(t, lines)
	require.Equal(t, "ERROR", lines[0]["level"])
	require.EqualValues(t, 7, lines[0]["redelivered"])

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 8 }, 120*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 8), h.audit(artist), "every event applied once, in order")
	require.Equal(t, 36, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = $1`, artist))
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 60*time.Second, 100*time.Millisecond)
}

// With Temporal's limits scaled down (continue-as-new suggested every 20
// history events, blobs refused past 16 KiB), a hot key's lane keeps its
// continue-as-new input under the blob limit: no lane is lost and every
// event applies once, in order.
func TestBridgeKafkaOrderingLaneUnderServerLimits(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	h.temporal = testenv.TemporalWithLimits(t, map[string]string{
		"limit.historyCount.suggestContinueAsNew": "20",
		"limit.blobSize.error":                    "16384",
		"limit.blobSize.warn":                     "8192",
	})
	h.taskQueue = testenv.TaskQueue(t)
	_, err := h.pool.Exec(h.ctx, orderingDDL)
	require.NoError(t, err)
	h.startWorker()
	o := h.options(nil)
	o.Retry = shortRetry
	o.Retry.MaxAttempts = 60
	o.MaxBackoff = 200 * time.Millisecond
	o.LaneMaxQueuedBytes = 8 << 10
	r := h.start(o)

	const artist = "artist-limits"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 31; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)
	require.Eventually(t, func() bool { return value(r.b.m.laneFull) > 0 }, 60*time.Second, 50*time.Millisecond,
		"the lane's byte budget is reached: the rest wait in the bridge")
	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 31 }, 180*time.Second, 200*time.Millisecond)
	require.Equal(t, seq(1, 31), h.audit(artist), "every event applied once, in order")
	require.Zero(t, value(r.b.m.lanesLost), "no lane hit the server's limits")
	h.waitCommittedToEnd(60 * time.Second)
}
