package starter

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

// mixed returns n records over partitions: ARTIST_FOLLOWED, TRACK_PLAYED
// (plays 1, days 1) and an unlisted type in turn, and how many of each.
func mixed(prefix string, n int, partitions int32) (recs []*kgo.Record, follows, plays, skipped int) {
	for i := range n {
		p := int32(i) % partitions
		id := fmt.Sprintf("%s-%d", prefix, i)
		switch i % 3 {
		case 0:
			recs = append(recs, envRecord(p, followed(id, "user-"+id, fmt.Sprintf("artist-%d", i%7))))
			follows++
		case 1:
			// Kafka keys by entity, so an artist's plays share a partition.
			recs = append(recs, envRecord(p, played(id, fmt.Sprintf("artist-p%d-%d", p, i%5), 1, 1)))
			plays++
		default:
			recs = append(recs, envRecord(p, unlisted(id, "playlist-"+id)))
			skipped++
		}
	}
	return recs, follows, plays, skipped
}

func TestBridgeKafkaHappyPath(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 3, noTemporal: true})
	starter := newRecordingStarter(nil)

	first, f1, p1, s1 := mixed("a", 600, 3)
	h.produce(first...)
	r := h.start(h.options(starter))
	second, f2, p2, s2 := mixed("b", 600, 3)
	h.produce(second...)

	h.waitCommittedToEnd(60 * time.Second)
	require.Equal(t, f1+f2, h.count(`SELECT count(*) FROM artist_followers`))
	require.Equal(t, p1+p2, h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats`))
	require.Equal(t, f1+f2+p1+p2, h.count(`SELECT count(*) FROM causet_projection_applied`))
	require.Zero(t, starter.calls.Load(), "nothing failed, so nothing goes to Temporal")

	m := r.b.m
	require.EqualValues(t, 1200, value(m.consumed))
	require.EqualValues(t, s1+s2, value(m.skipped))
	require.EqualValues(t, f1+f2+p1+p2, value(m.applied.WithLabelValues("applied")))
	require.Zero(t, total(m.deadLettered))
	ends := h.endOffsets()
	for p := range int32(3) {
		require.EqualValues(t, ends[p], value(m.committed.WithLabelValues(h.topic, fmt.Sprint(p))))
	}

	// A clean stop commits and a restart has nothing left to do.
	r.stop(t)
	h.waitCommittedToEnd(5 * time.Second)
}

func TestBridgeKafkaFailuresBecomeWorkflows(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 3, followersDDL: testenv.FollowersNoFollowedAtDDL})

	// Partition 0: a failing follow, a failing play (days 0), then 100
	// good plays. Partitions 1 and 2 carry good plays only.
	var recs []*kgo.Record
	recs = append(recs, envRecord(0, played("ok-0", "artist-1", 1, 1)))
	follow := followed(h.prefix+"fail-follow", "user-123", "artist-9")
	recs = append(recs, envRecord(0, follow))
	div := played(h.prefix+"fail-div", "artist-2", 5, 0)
	recs = append(recs, envRecord(0, div))
	for i := range 100 {
		recs = append(recs, envRecord(int32(i%3), played(fmt.Sprintf("ok-later-%d", i), "artist-1", 1, 1)))
	}
	h.produce(recs...)
	before := time.Now()
	r := h.start(h.plainOptions(nil))

	h.waitCommittedToEnd(60 * time.Second)
	// Later events of the same partition were applied while the failures
	// wait in Temporal (no worker polls this task queue: they stay retrying).
	require.Equal(t, 101, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = 'artist-1'`))
	require.Equal(t, 0, h.count(`SELECT count(*) FROM artist_stats WHERE artist_id = 'artist-2'`))

	cases := []struct {
		projection, kind, errPart string
		ev                        any
		eventID, entity, evType   string
		offset                    int64
	}{
		{"artist_followers", "sql", `column "followed_at"`, follow, follow.EventID, follow.EntityID, follow.EventType, 1},
		{"artist_stats", "ir_eval", "division by zero", div, div.EventID, div.EntityID, div.EventType, 2},
	}
	for _, tc := range cases {
		id := contract.RetryWorkflowID(tc.projection, "production", tc.eventID)
		require.Equal(t, "projection-retry:"+tc.projection+":production:"+tc.eventID, id)
		in, desc := h.startedInput(id)
		require.Equal(t, contract.RetryWorkflowName, desc.WorkflowExecutionInfo.Type.Name)
		require.Equal(t, h.taskQueue, desc.WorkflowExecutionInfo.TaskQueue)
		sa := searchAttrs(t, desc)
		require.Contains(t, sa["CausetError"], tc.errPart, "attempt 1's error is a column of the list")
		delete(sa, "CausetError")
		require.Equal(t, map[string]string{
			"CausetProjection": tc.projection, "CausetEventType": tc.evType, "CausetEntityId": tc.entity,
			"CausetForkId": "production", "CausetRetryState": "retrying",
		}, sa)
		require.Equal(t, tc.projection, in.Projection)
		require.Equal(t, tc.eventID, in.Event.EventID)
		require.Equal(t, config.ModeInline, in.Mode)
		require.Equal(t, config.DefaultRetry(), in.Retry)
		require.Equal(t, 168*time.Hour, in.ReplayWindow)
		require.False(t, in.Source.Timestamp.IsZero(), "the record's timestamp is kept")
		require.Equal(t, contract.Source{Topic: h.topic, Partition: 0, Offset: tc.offset, Timestamp: in.Source.Timestamp}, in.Source)
		require.Equal(t, []byte(tc.entity), in.Key)
		require.NotNil(t, in.FirstAttempt)
		require.Equal(t, 1, in.FirstAttempt.Number)
		require.Equal(t, tc.kind, in.FirstAttempt.ErrorKind)
		require.Contains(t, in.FirstAttempt.Error, tc.errPart)
		require.Equal(t, 1, in.FirstAttempt.IRVersion)
		require.WithinDuration(t, time.Now(), in.FirstAttempt.StartedAt, time.Since(before)+time.Second)
	}
	require.EqualValues(t, 2, value(r.b.m.handedOff.WithLabelValues("inline")))
	require.EqualValues(t, 1, value(r.b.m.failed.WithLabelValues("sql")))
	require.EqualValues(t, 1, value(r.b.m.failed.WithLabelValues("ir_eval")))

	// Attempt 1's failure is logged as the seed's projection_retry line, with
	// topic/partition/offset, once its workflow is durable.
	lines := h.logs.Containing("projection_retry")
	require.Len(t, lines, 2)
	for _, l := range lines {
		require.Equal(t, h.topic, l["topic"])
		require.EqualValues(t, 0, l["partition"])
		require.Contains(t, l, "offset")
		for _, f := range []string{"projectionName", "eventType", "entityId", "forkId", "error"} {
			require.NotEmpty(t, l[f], f)
		}
		require.EqualValues(t, 1, l["retryAttempt"])
		require.Equal(t, "1s", l["nextRetryIn"])
	}
}

func TestBridgeKafkaCrashNoDoubleEffects(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 3, followersDDL: testenv.FollowersNoFollowedAtDDL})
	starter := newRecordingStarter(h.temporal.Client)

	// Wave 1: plays (succeed) and follows (fail → workflows).
	var wave1 []*kgo.Record
	for i := range 90 {
		if i%10 == 0 {
			wave1 = append(wave1, envRecord(int32(i%3), followed(fmt.Sprintf("%sf-%d", h.prefix, i), fmt.Sprintf("user-%d", i), "artist-1")))
			continue
		}
		wave1 = append(wave1, envRecord(int32(i%3), played(fmt.Sprintf("p-%d", i), "artist-1", 1, 1)))
	}
	h.produce(wave1...)
	o := h.plainOptions(starter)
	o.CommitInterval = time.Hour // nothing committed before the crash
	a := h.start(o)
	require.Eventually(t, func() bool {
		return h.count(`SELECT count(*) FROM causet_projection_applied`) == 81 && len(starter.ids()) == 9
	}, 60*time.Second, 50*time.Millisecond)
	h.crash(a)
	require.Empty(t, h.committed(), "the crashed bridge committed nothing")

	// Wave 2 arrives while no bridge runs; a new bridge redelivers everything.
	var wave2 []*kgo.Record
	for i := range 30 {
		wave2 = append(wave2, envRecord(int32(i%3), played(fmt.Sprintf("q-%d", i), "artist-1", 1, 1)))
	}
	h.produce(wave2...)
	b := h.start(h.plainOptions(starter))
	h.waitCommittedToEnd(60 * time.Second)

	require.Equal(t, 81+30, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = 'artist-1'`), "no effect applied twice")
	require.Equal(t, 81+30, h.count(`SELECT count(*) FROM causet_projection_applied`))
	require.EqualValues(t, 81, value(b.b.m.applied.WithLabelValues("duplicate")), "redelivered events found in the ledger")
	for id, n := range starter.ids() {
		require.Equal(t, 2, n, "%s: started by both bridges", id)
	}
	// ... but Temporal holds one run per event.
	require.Eventually(t, func() bool { return len(h.workflowsOnQueue()) == 9 }, 20*time.Second, 200*time.Millisecond)
	seen := map[string]bool{}
	for _, id := range h.workflowsOnQueue() {
		require.False(t, seen[id], "second run for %s", id)
		seen[id] = true
	}
}

func TestBridgeKafkaRebalanceEachEventOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 6, noTemporal: true})
	starter := newRecordingStarter(nil)
	const total = 3000
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < total; i += 100 {
			var recs []*kgo.Record
			for j := i; j < i+100; j++ {
				recs = append(recs, envRecord(int32(j%6), played(fmt.Sprintf("e-%d", j), fmt.Sprintf("artist-%d", j%6), 1, 1)))
			}
			if err := h.producer.ProduceSync(h.ctx, recs...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	a := h.start(h.options(starter))
	require.Eventually(t, func() bool { return h.count(`SELECT count(*) FROM causet_projection_applied`) > 300 }, 60*time.Second, 20*time.Millisecond)
	b := h.start(h.options(starter)) // rebalance: a gives up partitions to b
	require.Eventually(t, func() bool {
		return value(b.b.m.consumed) > 100
	}, 60*time.Second, 20*time.Millisecond, "second bridge never got records")
	a.stop(t) // second rebalance: b takes everything
	<-produced
	h.waitCommittedToEnd(90 * time.Second)

	if n := h.count(`SELECT count(*) FROM causet_projection_applied`); n != total {
		rows, err := h.pool.Query(h.ctx, `SELECT g FROM generate_series(0, $1 - 1) g WHERE NOT EXISTS (SELECT 1 FROM causet_projection_applied
			WHERE key IN (SELECT causet_applied_key(name, 'production', 'e-' || g) FROM causet_projection_versions))`, total)
		require.NoError(t, err)
		var missing []string
		for rows.Next() {
			var g int
			require.NoError(t, rows.Scan(&g))
			missing = append(missing, fmt.Sprintf("p%d@%d", g%6, g/6))
		}
		t.Logf("missing %d: %v", len(missing), missing)
		if f := os.Getenv("BRIDGE_TEST_LOG"); f != "" {
			_ = os.WriteFile(f, []byte(h.logs.String()), 0o644)
		}
	}
	require.Equal(t, total, h.count(`SELECT count(*) FROM causet_projection_applied`))
	require.Equal(t, total, h.count(`SELECT sum(plays)::int FROM artist_stats`), "each event applied once")
	t.Logf("consumed: a=%v b=%v (redelivered after rebalance: %v)", value(a.b.m.consumed),
		value(b.b.m.consumed), value(a.b.m.consumed)+value(b.b.m.consumed)-total)
	require.Zero(t, starter.calls.Load())
}

func TestBridgeKafkaTemporalOutage(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, followersDDL: testenv.FollowersNoFollowedAtDDL})
	starter := newRecordingStarter(h.temporal.Client)
	o := h.plainOptions(starter)
	o.MaxBackoff = 200 * time.Millisecond
	r := h.start(o)

	h.produce(envRecord(0, followed(h.prefix+"f-0", "user-0", "artist-1")), envRecord(0, played("p-0", "artist-1", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Len(t, starter.ids(), 1)

	// Temporal goes away; failures keep coming, with good events after them.
	starter.down.Store(true)
	var recs []*kgo.Record
	for i := 1; i <= 20; i++ {
		recs = append(recs, envRecord(0, followed(fmt.Sprintf("%sf-%d", h.prefix, i), fmt.Sprintf("user-%d", i), "artist-1")))
		recs = append(recs, envRecord(0, played(fmt.Sprintf("p-%d", i), "artist-1", 1, 1)))
	}
	h.produce(recs...)
	firstFailure := h.endOffsets()[0] - int64(len(recs)) // offset of f-1
	require.Eventually(t, func() bool { return h.count(`SELECT plays::int FROM artist_stats`) == 21 }, 30*time.Second, 20*time.Millisecond,
		"good events are applied while Temporal is down")
	require.Eventually(t, func() bool { return starter.fails.Load() > 20 }, 30*time.Second, 20*time.Millisecond)
	time.Sleep(time.Second)
	require.Equal(t, firstFailure, h.committed()[0], "offsets stop at the first failure not yet handed off")
	require.Len(t, starter.ids(), 1)
	require.GreaterOrEqual(t, value(r.b.m.outages.WithLabelValues("temporal")), 1.0)

	starter.down.Store(false)
	h.waitCommittedToEnd(30 * time.Second)
	ids := starter.ids()
	require.Len(t, ids, 21, "every failure handed off after recovery")
	for i := 0; i <= 20; i++ {
		require.Contains(t, ids, contract.RetryWorkflowID("artist_followers", "production", fmt.Sprintf("%sf-%d", h.prefix, i)))
	}
	require.EqualValues(t, 21, value(r.b.m.handedOff.WithLabelValues("inline")))
}

func TestBridgeKafkaDatabaseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s outage")
	}
	h := newHarness(t, harnessOptions{partitions: 3, noTemporal: true})
	starter := newRecordingStarter(nil)
	o := h.options(starter)
	o.MaxBackoff = 2 * time.Second
	r := h.start(o)

	wave1, f1, p1, _ := mixed("a", 150, 3)
	h.produce(wave1...)
	h.waitCommittedToEnd(30 * time.Second)

	testenv.StopPostgres(t)
	wave2, f2, p2, _ := mixed("b", 300, 3)
	h.produce(wave2...)
	time.Sleep(20 * time.Second)
	require.Zero(t, starter.calls.Load(), "no workflow started because of an outage")
	require.Zero(t, total(r.b.m.deadLettered), "no dead letter because of an outage")
	require.GreaterOrEqual(t, value(r.b.m.outages.WithLabelValues("database")), 1.0)
	ends := h.endOffsets()
	c := h.committed()
	behind := false
	for p, end := range ends {
		behind = behind || c[p] < end
	}
	require.True(t, behind, "offsets must not pass unapplied events")

	testenv.StartPostgres(t)
	h.waitCommittedToEnd(60 * time.Second)
	require.Equal(t, f1+f2, h.count(`SELECT count(*) FROM artist_followers`))
	require.Equal(t, p1+p2, h.count(`SELECT sum(plays)::int FROM artist_stats`))
	require.Zero(t, starter.calls.Load())
	require.Zero(t, total(r.b.m.deadLettered))
	require.NotEmpty(t, h.logs.Containing("database unreachable"))
}

func TestBridgeKafkaPoisonRecord(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	starter := newRecordingStarter(nil)
	r := h.start(h.options(starter))

	raw := []byte(`{"eventId": 42, not json`)
	h.produce(&kgo.Record{Partition: 0, Key: []byte("k-1"), Value: raw},
		envRecord(0, played("p-after", "artist-1", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, 1, h.count(`SELECT plays::int FROM artist_stats`))

	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var got []*kgo.Record
	require.Eventually(t, func() bool {
		f := cl.PollFetches(h.ctx)
		got = append(got, f.Records()...)
		return len(got) >= 1
	}, 20*time.Second, 10*time.Millisecond)
	require.Len(t, got, 1)
	require.Equal(t, []byte("k-1"), got[0].Key)
	rec, err := dlq.Decode(got[0].Value)
	require.NoError(t, err)
	require.Equal(t, "invalid_event", rec.ErrorKind)
	require.Equal(t, raw, rec.RawValue)
	require.Nil(t, rec.Event)
	require.Empty(t, rec.ProjectionName)
	require.Contains(t, rec.Error, "invalid event")
	require.False(t, rec.Source.Timestamp.IsZero(), "the record's timestamp is kept")
	require.Equal(t, contract.Source{Topic: h.topic, Partition: 0, Offset: 0, Timestamp: rec.Source.Timestamp}, rec.Source)
	require.EqualValues(t, 1, total(r.b.m.deadLettered))
	require.EqualValues(t, 1, value(r.b.m.deadLettered.WithLabelValues("", "invalid_event")), "a record that is not an envelope has no projection")
	require.Zero(t, starter.calls.Load())
	headers := map[string]string{}
	for _, hd := range got[0].Headers {
		headers[hd.Key] = string(hd.Value)
	}
	require.Equal(t, "invalid_event", headers[dlq.HeaderErrorKind])
	require.Equal(t, "0", headers[dlq.HeaderSourceOffset])
}

// TestBridgeKafkaTemporalStopped kills the real dev server mid-stream.
func TestBridgeKafkaTemporalStopped(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, followersDDL: testenv.FollowersNoFollowedAtDDL})
	o := h.plainOptions(nil)
	o.StartTimeout = 2 * time.Second
	o.MaxBackoff = 500 * time.Millisecond
	r := h.start(o)
	h.produce(envRecord(0, followed(h.prefix+"f-0", "user-0", "artist-1")), envRecord(0, played("p-0", "artist-1", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)

	testenv.StopTemporal(t)
	var recs []*kgo.Record
	for i := 1; i <= 10; i++ {
		recs = append(recs, envRecord(0, followed(fmt.Sprintf("%sf-%d", h.prefix, i), fmt.Sprintf("user-%d", i), "artist-1")))
		recs = append(recs, envRecord(0, played(fmt.Sprintf("p-%d", i), "artist-1", 1, 1)))
	}
	h.produce(recs...)
	firstFailure := h.endOffsets()[0] - int64(len(recs))
	require.Eventually(t, func() bool { return h.count(`SELECT plays::int FROM artist_stats`) == 11 }, 30*time.Second, 20*time.Millisecond)
	time.Sleep(3 * time.Second)
	require.Equal(t, firstFailure, h.committed()[0], "offsets stop at the first failure not yet handed off")
	require.GreaterOrEqual(t, value(r.b.m.outages.WithLabelValues("temporal")), 1.0)

	testenv.StartTemporal(t)
	h.waitCommittedToEnd(90 * time.Second)
	for i := 1; i <= 10; i++ {
		_, err := h.describe(contract.RetryWorkflowID("artist_followers", "production", fmt.Sprintf("%sf-%d", h.prefix, i)))
		require.NoError(t, err, "failure %d handed off after the restart", i)
	}
	require.NotEmpty(t, h.logs.Containing("cannot start retry workflow"))
}
