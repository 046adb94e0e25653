package starter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
)

// Switching CAUSET_DLQ_HOLD_ENTITY off while a dead letter holds its key:
// the bridge restarted without the hold releases the parked events in
// order. The first of them fails again and becomes the key's new head (its
// own schedule, its own dead letter); the one behind it stays parked until
// that head dead-letters, then applies.
func TestBridgeKafkaHoldEntitySwitchedOffReleasesInOrder(t *testing.T) {
	h, o := followHarness(t)
	held := o
	held.HoldEntity = true
	r1 := h.start(held)
	user := h.prefix + "user-switch"
	evs := []*kgo.Record{
		envRecord(0, sequenced(followed(h.prefix+"f1", user, "artist-1"), 1)),
		envRecord(0, sequenced(unfollowed(h.prefix+"u1", user, "artist-1"), 2)),
		envRecord(0, sequenced(followed(h.prefix+"f2", user, "artist-2"), 3)),
		envRecord(0, sequenced(unfollowed(h.prefix+"u2", user, "artist-2"), 4)),
	}
	h.produce(evs[0])
	head := contract.RetryWorkflowID("artist_followers", "production", h.prefix+"f1")
	require.Eventually(t, func() bool { return h.blockedRows() == 1 }, 30*time.Second, 50*time.Millisecond)
	h.produce(evs[1:]...)
	h.waitState(head, contract.StateDeadLettered)
	time.Sleep(3 * headPoll)
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, 3, h.count(`SELECT parked::int FROM causet_blocked_keys WHERE entity_id = $1`, user),
		"the held dead letter keeps its key's three later events parked")
	r1.stop(t)

	o.Registerer = prometheus.NewRegistry()
	r2 := h.start(o)
	next := contract.RetryWorkflowID("artist_followers", "production", h.prefix+"f2")
	h.waitState(next, contract.StateDeadLettered)
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the second dead letter is not held either: the last parked event applies and the key unblocks")
	require.Zero(t, h.follows(user))
	require.EqualValues(t, 2, value(r2.b.m.parkedEvents.WithLabelValues("released")), "both unfollows released by the bridge")
	require.EqualValues(t, 1, value(r2.b.m.parkedEvents.WithLabelValues("head")), "the second follow became the key's head")
	recs := h.dlqRecords(2)
	require.Len(t, recs, 2)
	require.Equal(t, []string{head, next}, []string{recs[0].Workflow.ID, recs[1].Workflow.ID}, "dead-lettered in the user's order")
	r2.stop(t)
}

// Switching CAUSET_INCIDENT_POLICY from hold to dead-letter while an
// incident holds parked events: under dead-letter nothing is held, so the
// restarted bridge releases the incident's keys in order. Each key's first
// parked event fails again and becomes its head with a schedule of its own;
// the events behind it, and the users' new events, park behind that head.
// The column is added midway: every user's events end applied once in
// order, except those whose schedule ran out first, which are dead-lettered
// once and applied never.
func TestBridgeKafkaIncidentPolicySwitchedWhileParked(t *testing.T) {
	h, o := incidentHarness(t, config.IncidentHold)
	const users = 60
	var recs []*kgo.Record
	for i := range users {
		recs = append(recs, h.userTimeline(fmt.Sprintf("user-%03d", i))...)
	}
	h.produce(recs...)
	r1 := h.start(o)
	parked := func() int { return h.count(`SELECT count(*) FROM causet_parked_events WHERE topic = $1`, h.topic) }
	require.Eventually(t, func() bool { return len(h.incidents()) == 1 }, 60*time.Second, 100*time.Millisecond)
	h.waitCommittedToEnd(60 * time.Second)
	require.Positive(t, parked())
	incidentID := h.incidents()[0]
	heldBy := func(head string) map[string]bool {
		out := map[string]bool{}
		rows, err := h.pool.Query(h.ctx, `SELECT entity_id FROM causet_blocked_keys WHERE topic = $1 AND head_workflow_id LIKE $2`, h.topic, head)
		require.NoError(t, err)
		for rows.Next() {
			var u string
			require.NoError(t, rows.Scan(&u))
			out[u] = true
		}
		require.NoError(t, rows.Err())
		return out
	}
	heldUsers := heldBy(incidentID)
	require.NotEmpty(t, heldUsers)
	r1.stop(t)

	// The operator switches the policy of every process: the worker's runs
	// no longer join holds either.
	o.Incidents.Policy = config.IncidentDeadLetter
	o.Registerer = prometheus.NewRegistry()
	// Schedules long enough (2 s, 4 s, 8 s) that the fix, made once a held
	// user's first dead letter is read back from the DLQ topic (seconds on a
	// loaded machine), lands while the users' later follows still retry.
	o.Retry = config.Retry{MaxAttempts: 4, Initial: 2 * time.Second, Multiplier: 2, Max: 8 * time.Second}
	h.restartWorker(false)
	r2 := h.start(o)
	require.Eventually(t, func() bool { return len(heldBy(incidentID)) == 0 }, 30*time.Second, 100*time.Millisecond,
		"no key stays behind the incident under dead-letter")
	var later []*kgo.Record
	for u := range heldUsers {
		later = append(later,
			envRecord(partitionOf(u), unfollowed(h.prefix+u+"-4", u, "artist-b")),
			envRecord(partitionOf(u), followed(h.prefix+u+"-5", u, "artist-c")))
	}
	h.produce(later...)
	h.waitCommittedToEnd(60 * time.Second)
	for u := range heldUsers {
		require.Empty(t, h.userAudit(u), "nothing of a held user applies while its first follow fails")
	}
	behindRetry := heldBy("projection-retry:%")
	for u := range heldUsers {
		require.True(t, behindRetry[u], "user %s waits behind its first follow's retry workflow", u)
	}

	// Fix the column once the first held user's schedule has run out.
	require.Eventually(t, func() bool {
		for _, rec := range h.dlqRecordsNow() {
			if heldUsers[rec.EntityID] {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "no held user's follow dead-lettered")
	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return parked() == 0 && h.blockedRows() == 0 }, 90*time.Second, 100*time.Millisecond,
		"parked %d, blocked %d", parked(), h.blockedRows())
	dead := map[string]bool{}
	for _, rec := range h.dlqRecordsNow() {
		dead[rec.Workflow.ID] = true
	}
	t.Logf("%d users held by the incident; %d dead letters in all", len(heldUsers), len(dead))
	require.Less(t, len(dead), 3*len(heldUsers), "some held users' follows applied after the fix")
	for u := range heldUsers {
		isDead := func(n int) bool {
			return dead[contract.RetryWorkflowID("artist_followers", "production", fmt.Sprintf("%s%s-%d", h.prefix, u, n))]
		}
		// An unfollow of a follow that was dead-lettered deletes nothing.
		var want []string
		for _, w := range []struct {
			op      string
			applies bool
		}{
			{"ins:artist-a", !isDead(1)}, {"del:artist-a", !isDead(1)},
			{"ins:artist-b", !isDead(3)}, {"del:artist-b", !isDead(3)},
			{"ins:artist-c", !isDead(5)},
		} {
			if w.applies {
				want = append(want, w.op)
			}
		}
		require.Equal(t, want, h.userAudit(u), "user %s: applied once each, in order, but for its dead letters", u)
	}
	r2.stop(t)
}

// dlqRecordsNow reads every record the DLQ topic holds.
func (h *harness) dlqRecordsNow() []dlq.Record {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(h.t, err)
	defer cl.Close()
	var out []dlq.Record
	for idle := 0; idle < 3; {
		ctx, cancel := context.WithTimeout(h.ctx, 500*time.Millisecond)
		n := 0
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			rec, err := dlq.Decode(r.Value)
			require.NoError(h.t, err)
			out = append(out, rec)
			n++
		})
		cancel()
		if n == 0 {
			idle++
		}
	}
	return out
}
