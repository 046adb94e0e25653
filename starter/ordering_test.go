package starter

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/enums/v1"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// orderingDDL makes artist_stats writes fail on demand and records every
// write in order: a row of fail_ctl (artist, plays or NULL for any) fails
// the matching inserts with a SQL error; stats_audit gets (artist,
// plays_per_day) of each write, in commit order of the key.
const orderingDDL = `
CREATE TABLE fail_ctl (artist_id text NOT NULL, plays bigint);
CREATE TABLE stats_audit (seq bigserial PRIMARY KEY, artist_id text NOT NULL, plays_per_day bigint);
CREATE FUNCTION stats_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM fail_ctl f WHERE f.artist_id = NEW.artist_id AND (f.plays IS NULL OR f.plays = NEW.plays)) THEN
    RAISE EXCEPTION 'flagged to fail (test)';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER stats_guard BEFORE INSERT ON artist_stats FOR EACH ROW EXECUTE FUNCTION stats_guard();
CREATE FUNCTION stats_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO stats_audit (artist_id, plays_per_day) VALUES (NEW.artist_id, NEW.plays_per_day);
  RETURN NEW;
END $$;
CREATE TRIGGER stats_audit AFTER INSERT OR UPDATE ON artist_stats FOR EACH ROW EXECUTE FUNCTION stats_audit_fn();
CREATE SEQUENCE follow_fail_seq;
CREATE FUNCTION follow_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- sequences ignore rollbacks: exactly the first two attempts fail
  IF NEW.user_id LIKE '%user-ff' AND nextval('follow_fail_seq') <= 2 THEN
    RAISE EXCEPTION 'follow flagged to fail (test)';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER follow_guard BEFORE INSERT ON artist_followers FOR EACH ROW EXECUTE FUNCTION follow_guard();
`

// shortRetry keeps ordering tests short: an attempt a second (Temporal keeps no shorter delay).
var shortRetry = config.Retry{MaxAttempts: 10, Initial: time.Second, Multiplier: 1, Max: time.Second}

// orderedHarness is a harness with the ordering DDL, a running worker and
// entity ordering.
func orderedHarness(t *testing.T, partitions int32) (*harness, Options) {
	h, o := workingHarness(t, harnessOptions{partitions: partitions}, orderingDDL)
	o.Retry = shortRetry
	require.Equal(t, config.Ordering(""), o.Ordering, "the default is entity")
	return h, o
}

func (h *harness) flag(artist string, plays int) {
	h.t.Helper()
	_, err := h.pool.Exec(h.ctx, `INSERT INTO fail_ctl (artist_id, plays) VALUES ($1, $2)`, artist, plays)
	require.NoError(h.t, err)
}

func (h *harness) unflag(artist string) {
	h.t.Helper()
	_, err := h.pool.Exec(h.ctx, `DELETE FROM fail_ctl WHERE artist_id = $1`, artist)
	require.NoError(h.t, err)
}

// audit returns the plays_per_day values written for artist, in write order.
func (h *harness) audit(artist string) []int64 {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `SELECT plays_per_day FROM stats_audit WHERE artist_id = $1 ORDER BY seq`, artist)
	require.NoError(h.t, err)
	var out []int64
	for rows.Next() {
		var v int64
		require.NoError(h.t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(h.t, rows.Err())
	return out
}

func seq(from, to int) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, int64(i))
	}
	return out
}

// nth is the n-th event of an artist: plays n, days 1, so plays_per_day n.
func nth(h *harness, artist string, n int) event.Envelope {
	return played(fmt.Sprintf("%s%s-%d", h.prefix, artist, n), artist, n, 1)
}

func (h *harness) blockedRows() int {
	return h.count(`SELECT count(*) FROM causet_blocked_keys WHERE topic = $1`, h.topic)
}

func TestBridgeKafkaOrderingFollowUnfollow(t *testing.T) {
	h, o := orderedHarness(t, 1)
	r := h.start(o)
	user := h.prefix + "user-ff"
	f := followed(h.prefix+"follow", user, "artist-9")
	u := followed(h.prefix+"unfollow", user, "artist-9")
	u.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, f), envRecord(0, u))

	fid := contract.RetryWorkflowID("artist_followers", "production", f.EventID)
	require.Eventually(t, func() bool {
		st, err := h.status(fid)
		return err == nil && st.State == contract.StateSucceeded
	}, 60*time.Second, 100*time.Millisecond)
	h.waitCommittedToEnd(30 * time.Second)
	require.Eventually(t, func() bool {
		// The event's rows under any deployed projection.
		return h.count(`SELECT count(*) FROM causet_projection_applied
			WHERE key IN (SELECT causet_applied_key(name, $1, $2) FROM causet_projection_versions)`, u.ForkID, u.EventID) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, h.count(`SELECT count(*) FROM artist_followers WHERE user_id = $1`, user), "final: not following")
	st, err := h.status(fid)
	require.NoError(t, err)
	failed := 0
	for _, a := range st.Attempts {
		if a.Error != "" {
			failed++
		}
	}
	// Two failed writes (attempt 1, plus its in-batch rerun when the unfollow
	// shared its batch, or attempt 2), then the successful one.
	require.GreaterOrEqual(t, failed, 1, "%+v", st.Attempts)
	require.Equal(t, 3, h.count(`SELECT last_value::int FROM follow_fail_seq`), "failed twice, then succeeded")
	require.Nil(t, st.DLQ)
	// The unfollow was parked behind the follow and released inline once the
	// follow succeeded: no workflow of its own.
	_, err = h.describe(contract.RetryWorkflowID("artist_followers", "production", u.EventID))
	require.Error(t, err, "the released event needed no retry workflow")
	require.EqualValues(t, 1, value(r.b.m.parkedEvents.WithLabelValues("parked")))
	require.EqualValues(t, 1, value(r.b.m.parkedEvents.WithLabelValues("released")))
	require.Eventually(t, func() bool { return h.blockedRows() == 0 && value(r.b.m.blockedKeys) == 0 },
		30*time.Second, 50*time.Millisecond, "key unblocked once its parked events were released")
}

func TestBridgeKafkaOrderingIncrementHeadRetrying(t *testing.T) {
	h, o := orderedHarness(t, 1)
	r := h.start(o)
	const artist = "artist-inc"
	h.flag(artist, 1)
	recs := []*kgo.Record{envRecord(0, nth(h, artist, 1))}
	for n := 2; n <= 101; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	for i := range 1000 {
		recs = append(recs, envRecord(0, played(fmt.Sprintf("%sother-%d", h.prefix, i), fmt.Sprintf("artist-o%d", i%20), 1, 1)))
	}
	rand.Shuffle(len(recs)-1, func(i, j int) { // later events of the key interleave with the others
		recs[i+1], recs[j+1] = recs[j+1], recs[i+1]
	})
	for i, n := 1, 2; i < len(recs); i++ { // ... but keep the key's own order
		var ev event.Envelope
		require.NoError(t, json.Unmarshal(recs[i].Value, &ev))
		if ev.EntityID == artist {
			recs[i] = envRecord(0, nth(h, artist, n))
			n++
		}
	}
	h.produce(recs...)

	require.Eventually(t, func() bool {
		return h.count(`SELECT coalesce(sum(plays), 0)::int FROM artist_stats WHERE artist_id <> $1`, artist) == 1000
	}, 60*time.Second, 50*time.Millisecond, "other entities flow while the head retries")
	st, err := h.status(contract.RetryWorkflowID("artist_stats", "production", nth(h, artist, 1).EventID))
	require.NoError(t, err)
	require.Equal(t, contract.StateRetrying, st.State, "the head is still retrying")
	require.Empty(t, h.audit(artist), "no later event of the key applied before the head")
	require.Equal(t, 1, h.blockedRows())
	require.EqualValues(t, 1, value(r.b.m.blockedKeys))

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 101 }, 90*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 101), h.audit(artist), "applied in partition order")
	require.Equal(t, 101*102/2, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = $1`, artist))
	require.Equal(t, 101, h.count(`SELECT plays_per_day::int FROM artist_stats WHERE artist_id = $1`, artist))
	h.waitCommittedToEnd(30 * time.Second)
	require.EqualValues(t, 100, value(r.b.m.parkedEvents.WithLabelValues("parked")))
	require.EqualValues(t, 100, value(r.b.m.parkedEvents.WithLabelValues("released")), "released in one run, no workflow each")
	require.EqualValues(t, 1, value(r.b.m.handedOff.WithLabelValues(string(config.ModeInline))), "only the head became a workflow")
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond)
}

func TestBridgeKafkaOrderingHeadDeadLetters(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 2, Max: time.Second}
	h.start(o)
	const artist = "artist-dl"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 6; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)
	head := contract.RetryWorkflowID("artist_stats", "production", nth(h, artist, 1).EventID)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 5 }, 60*time.Second, 100*time.Millisecond,
		"the parked events apply after the head dead-letters")
	require.Equal(t, seq(2, 6), h.audit(artist))
	st, err := h.status(head)
	require.NoError(t, err)
	require.Equal(t, contract.StateDeadLettered, st.State)
	require.NotNil(t, st.DLQ)

	// The dead letter still replays by signal once the cause is fixed.
	h.unflag(artist)
	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, head, "", contract.SignalReplay, contract.ReplaySignal{Reason: "fixed"}))
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 6 }, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, 21, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = $1`, artist))
	h.waitCommittedToEnd(30 * time.Second)
}

// A dead-lettered head's event read again after its key was released (the
// group's offsets lost) blocks the key behind the run it finds: that run
// had dead-lettered, so it is described at the watcher's next look, not
// after a whole schedule and its margin, and the key goes on at once.
func TestBridgeKafkaOrderingRereadDeadLetteredHeadIsDescribedAtOnce(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.headStaleAfter = 3 * time.Minute
	oa := o
	oa.Registerer = prometheus.NewRegistry()
	a := h.start(oa)
	const artist = "artist-rr"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 4; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 3 && h.blockedRows() == 0 }, 60*time.Second, 100*time.Millisecond,
		"the parked events apply after the head dead-letters, and the key is released")
	h.waitCommittedToEnd(30 * time.Second)
	h.crash(a)

	b := h.start(o)
	restarted := time.Now()
	require.Eventually(t, func() bool {
		return value(b.b.m.handedOff.WithLabelValues(string(config.ModeInline))) >= 1
	}, 30*time.Second, 50*time.Millisecond, "the head's event, read again, is handed to the run it had")
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 100*time.Millisecond,
		"the key behind a head that had dead-lettered waits for its schedule (%s) instead of a look", o.headStaleAfter)
	t.Logf("key released %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, seq(2, 4), h.audit(artist), "nothing applied again")
	require.Len(t, h.dlqRecordsNow(), 1, "one dead letter")
}

func TestBridgeKafkaOrderingRestartKeepsBlock(t *testing.T) {
	h, o := orderedHarness(t, 1)
	const artist = "artist-rs"
	h.flag(artist, 1)
	var recs []*kgo.Record
	for n := 1; n <= 4; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	h.produce(recs...)
	oa := o
	oa.CommitInterval = time.Hour // nothing committed before the crash
	oa.Registerer = prometheus.NewRegistry()
	a := h.start(oa)
	require.Eventually(t, func() bool { return value(a.b.m.parkedEvents.WithLabelValues("parked")) == 3 }, 30*time.Second, 50*time.Millisecond)
	h.crash(a)
	require.Empty(t, h.committed())
	require.Equal(t, 1, h.blockedRows(), "the block outlives the bridge")

	// Later events arrive while no bridge runs; the new bridge must not apply
	// them inline although it starts with an empty memory.
	recs = nil
	for n := 5; n <= 8; n++ {
		recs = append(recs, envRecord(0, nth(h, artist, n)))
	}
	recs = append(recs, envRecord(0, played(h.prefix+"other", "artist-other", 1, 1)))
	h.produce(recs...)
	b := h.start(o)
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, 1, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = 'artist-other'`))
	require.Empty(t, h.audit(artist), "nothing of the blocked key applied before its head")
	// Every later event is held; the head's own event, read again, is tried
	// again (and fails again: its retry workflow is found, not started twice).
	require.GreaterOrEqual(t, value(b.b.m.heldInline), 7.0)

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 8 }, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 8), h.audit(artist), "in order, each once")
	require.Equal(t, 36, h.count(`SELECT plays::int FROM artist_stats WHERE artist_id = $1`, artist))
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond)
}

// TestBridgeKafkaOrderingHeadOutlivesRestart: the failure that blocks a key
// is a retry workflow of its own, recorded with the block, so a bridge that
// starts with an empty memory keeps the key blocked while that workflow
// retries, even when the key has no parked event.
func TestBridgeKafkaOrderingHeadOutlivesRestart(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.Retry = config.Retry{MaxAttempts: 60, Initial: time.Second, Multiplier: 1, Max: time.Second}
	const artist = "artist-ho"
	h.flag(artist, 1)
	oa := o
	oa.Registerer = prometheus.NewRegistry()
	a := h.start(oa)
	h.produce(envRecord(0, nth(h, artist, 1)))
	head := contract.RetryWorkflowID("artist_stats", "production", nth(h, artist, 1).EventID)
	require.Eventually(t, func() bool { return value(a.b.m.handedOff.WithLabelValues(string(config.ModeInline))) == 1 }, 30*time.Second, 50*time.Millisecond)
	desc, err := h.describe(head)
	require.NoError(t, err)
	require.Nil(t, desc.GetWorkflowExecutionInfo().GetParentExecution(), "the head is a workflow of its own")
	var stored string
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT head_workflow_id FROM causet_blocked_keys WHERE topic = $1 AND entity_id = $2`,
		h.topic, artist).Scan(&stored))
	require.Equal(t, head, stored)
	h.waitCommittedToEnd(30 * time.Second)
	a.stop(t)

	b := h.start(o)
	time.Sleep(3 * headPoll) // the watcher polls while only the head holds the key
	require.Equal(t, 1, h.blockedRows(), "the key stays blocked while its head retries")
	h.produce(envRecord(0, nth(h, artist, 2)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Empty(t, h.audit(artist), "the later event waits for the head")
	require.EqualValues(t, 1, value(b.b.m.parkedEvents.WithLabelValues("parked")))

	h.unflag(artist)
	require.Eventually(t, func() bool { return len(h.audit(artist)) == 2 }, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, seq(1, 2), h.audit(artist))
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond)
}

// TestBridgeKafkaOrderingReleaseRace sends events of keys while their
// parked events are released: parking, releases and keys unblocked and
// blocked again all meet, and the order of each key must hold.
func TestBridgeKafkaOrderingReleaseRace(t *testing.T) {
	h, o := orderedHarness(t, 1)
	r := h.start(o)
	const keys, per = 10, 30
	var wg sync.WaitGroup
	for k := range keys {
		artist := fmt.Sprintf("artist-race-%d", k)
		h.flag(artist, 1)
		h.produce(envRecord(0, nth(h, artist, 1)), envRecord(0, nth(h, artist, 2)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			if _, err := h.pool.Exec(h.ctx, `DELETE FROM fail_ctl WHERE artist_id = $1`, artist); err != nil {
				t.Error(err)
				return
			}
			for n := 3; n <= per; n++ {
				time.Sleep(time.Duration(10+rand.IntN(90)) * time.Millisecond)
				if err := h.producer.ProduceSync(h.ctx, envRecord(0, nth(h, artist, n))).FirstErr(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		artist := fmt.Sprintf("artist-race-%d", k)
		require.Eventually(t, func() bool { return len(h.audit(artist)) >= per }, 90*time.Second, 100*time.Millisecond, artist)
		require.Equal(t, seq(1, per), h.audit(artist), "order of %s", artist)
	}
	h.waitCommittedToEnd(30 * time.Second)
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond)
	t.Logf("parked=%v released=%v heads=%v unblocked=%v",
		value(r.b.m.parkedEvents.WithLabelValues("parked")), value(r.b.m.parkedEvents.WithLabelValues("released")),
		value(r.b.m.parkedEvents.WithLabelValues("head")), value(r.b.m.unblocked.WithLabelValues("released")))
}

func TestBridgeKafkaOrderingNone(t *testing.T) {
	h, o := orderedHarness(t, 1)
	o.Ordering = config.OrderingNone
	h.start(o)
	const artist = "artist-none"
	h.flag(artist, 1)
	h.produce(envRecord(0, nth(h, artist, 1)), envRecord(0, nth(h, artist, 2)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, []int64{2}, h.audit(artist), "the later event applies inline at once (documented trade-off)")
	desc, err := h.describe(contract.RetryWorkflowID("artist_stats", "production", nth(h, artist, 1).EventID))
	require.NoError(t, err)
	require.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.WorkflowExecutionInfo.Status)
	require.Zero(t, h.blockedRows())
}
