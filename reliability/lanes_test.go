package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/workflows"
)

// Scenarios of entity ordering (the default configuration) that only it
// has: a key blocked by a failure with thousands of events behind it, and a
// lane terminated from outside.

// keyedEvents builds a stream of events with explicit entities and
// partitions; sequences grow in the order events are added.
type keyedEvents struct {
	s   *stack
	evs []evt
}

func (k *keyedEvents) add(kind string, n int, entity string, partition int32, fails bool) evt {
	e := evt{id: fmt.Sprintf("%s-%s-%d", k.s.prefix, kind, n), entity: entity, seq: int64(len(k.evs)),
		fails: fails, partition: partition}
	k.evs = append(k.evs, e)
	return e
}

// appliedOf counts the events of ids that have their row.
func (s *stack) appliedOf(ids []string) int {
	return s.countSQL(`SELECT count(*)::int FROM rel_effects WHERE event_id = ANY($1)`, ids)
}

// waitHeadStatus returns the status of a retry workflow once it answers.
func (s *stack) waitHeadStatus(id string, within time.Duration) contract.Status {
	s.t.Helper()
	var st contract.Status
	require.Eventually(s.t, func() bool {
		var err error
		st, err = s.status(id)
		return err == nil
	}, within, 100*time.Millisecond, "retry workflow %s never answered its status query", id)
	return st
}

// lastOf is the sequence of the last event of entity in evs.
func lastOf(evs []evt, entity string) int64 {
	last := int64(-1)
	for _, e := range evs {
		if e.entity == entity && !e.fails {
			last = max(last, e.seq)
		}
	}
	return last
}

// checkOrder asserts that entity's succeeding events all applied, once
// each, in sequence order.
func checkOrder(t *testing.T, r *result, s *stack, evs []evt, entity, name string) {
	t.Helper()
	want := int64(0)
	for _, e := range evs {
		if e.entity == entity && !e.fails {
			want++
		}
	}
	o := s.orderOf(entity)
	r.fig(name+"_applied", fmt.Sprintf("%d/%d", o.n, want))
	r.fig(name+"_last_seq", fmt.Sprintf("%d/%d", o.lastSeq, lastOf(evs, entity)))
	r.fig(name+"_inversions", o.inversions)
	require.Equal(t, want, o.n, "%s: events applied", name)
	require.Equal(t, lastOf(evs, entity), o.lastSeq, "%s: the last event applied last", name)
	require.Zero(t, o.inversions, "%s: events applied out of order", name)
}

// Scenario 9: a hot key. The first event of one entity fails every attempt
// and thousands of the entity's events queue behind it; they must all apply
// once, in order, after the head is dead-lettered, while other keys, on the
// hot key's partition and elsewhere, keep moving.
func TestReliability9HotKey(t *testing.T) {
	p := gate(t)
	r := newResult(t, "hot_key/entity")
	hot := pick(p, 300, 3000)
	s := newStack(t, stackOptions{partitions: 6})
	// The default schedule: the head retries for 15 s, in which the other
	// keys must move on.
	w := s.worker(nil)
	b := s.bridge(nil)

	const hotPart = 0
	// The bridge holds up to LaneMaxQueued events for lanes before it holds
	// the partition: the cold events among the first followers never wait.
	early := min(hot-1, config.DefaultLaneMaxQueued/2)
	k := &keyedEvents{s: s}
	var earlyIDs, otherIDs, hotIDs []string
	head := k.add("hot", 0, "hot", hotPart, true)
	for n := 1; n < hot; n++ {
		hotIDs = append(hotIDs, k.add("hot", n, "hot", hotPart, false).id)
		// Another key on the hot partition, and one elsewhere.
		cold := k.add("cold", n, fmt.Sprintf("cold-%d", n%50), hotPart, false)
		warm := k.add("warm", n, fmt.Sprintf("warm-%d", n%50), int32(1+n%5), false)
		otherIDs = append(otherIDs, cold.id, warm.id)
		earlyIDs = append(earlyIDs, warm.id)
		if n <= early {
			earlyIDs = append(earlyIDs, cold.id)
		}
	}
	var events eventLog
	start := time.Now()
	s.produce(k.evs, &events)
	r.fig("hot_events", hot)
	r.fig("other_events", len(otherIDs))

	require.Eventually(t, func() bool { return s.appliedOf(earlyIDs) == len(earlyIDs) }, 3*time.Minute, 200*time.Millisecond,
		"other keys' events not applied; bridge log:\n%s", b.logTail(20))
	r.fig("others_applied_s", time.Since(start).Round(100*time.Millisecond).Seconds())
	st := s.waitHeadStatus(wfID(head.id), 30*time.Second)
	hotApplied := s.appliedOf(hotIDs)
	r.fig("head_state_when_others_applied", st.State)
	require.Equal(t, contract.StateRetrying, st.State, "other keys waited for the hot key's head")
	require.Zero(t, hotApplied, "a hot key event applied before its head settled")

	drain := pick(p, 10*time.Minute, 60*time.Minute)
	require.Eventually(t, func() bool { return s.appliedOf(otherIDs) == len(otherIDs) }, drain, 500*time.Millisecond,
		"other keys' events not applied; bridge log:\n%s", b.logTail(20))
	hotAtOthers := s.appliedOf(hotIDs)
	r.fig("others_all_applied_s", time.Since(start).Round(100*time.Millisecond).Seconds())
	r.fig("hot_applied_when_others_done", hotAtOthers)
	require.Less(t, hotAtOthers, hot-1, "other keys on the hot partition waited for the whole hot key")

	deadline := time.Now().Add(drain)
	for s.orderOf("hot").n < int64(hot-1) && time.Now().Before(deadline) && !b.exited() && !w.exited() {
		time.Sleep(time.Second)
	}
	r.fig("hot_applied_s", time.Since(start).Round(time.Second).Seconds())
	// How fast the lane ran the key's events, one child workflow each.
	var laneSecs float64
	require.NoError(t, s.pool.QueryRow(s.ctx, `SELECT coalesce(extract(epoch FROM max(applied_at) - min(applied_at)), 0)::float8
		FROM causet_projection_applied
		WHERE key IN (SELECT causet_applied_key(v.name, 'production', id) FROM unnest($1::text[]) id, causet_projection_versions v)`,
		hotIDs).Scan(&laneSecs))
	r.fig("hot_lane_s", fmt.Sprintf("%.1f", laneSecs))
	if laneSecs > 0 {
		r.fig("hot_lane_events_per_s", fmt.Sprintf("%.1f", float64(s.orderOf("hot").n)/laneSecs))
	}
	require.True(t, s.waitCommittedToEnd(2*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b.logTail(30))
	s.waitDLQCount(1, time.Minute)
	require.Eventually(t, func() bool { return s.blockedKeys() == 0 }, 2*time.Minute, time.Second,
		"the hot key stays blocked after its lane ran")
	time.Sleep(2 * time.Second)
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	r.fig("bridge_lane_full", b.metric("causet_bridge_lane_full_total"))
	r.fig("bridge_lanes_lost", b.metric("causet_bridge_lanes_lost_total"))
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
	checkOrder(t, r, s, events.all(), "hot", "hot")
	require.Equal(t, hot-1, v.laned, "every later event of the hot key ran in its lane")
	require.Zero(t, b.metric("causet_bridge_lanes_lost_total"), "no lane lost")
}

// Scenario 10: a lane terminated from outside (`temporal workflow
// terminate`) while events wait in it. Two keys: one whose lane still waits
// for its head, one whose lane is half way through its events. The bridge
// must notice, alert (projection_lane_lost at ERROR, lanes_lost_total) and
// send the events the lane never started to a new lane run: in the end every
// event is applied once, in order, or dead-lettered.
func TestReliability10LaneTerminated(t *testing.T) {
	p := gate(t)
	r := newResult(t, "lane_terminated/entity")
	waiting, running := 30, pick(p, 100, 300)
	s := newStack(t, stackOptions{partitions: 3})
	// The default schedule: the heads retry for 15 s.
	w := s.worker(nil)
	b := s.bridge(nil)

	k := &keyedEvents{s: s}
	k.add("wait", 0, "lane-wait", 0, true)
	for n := 1; n <= waiting; n++ {
		k.add("wait", n, "lane-wait", 0, false)
	}
	k.add("run", 0, "lane-run", 1, true)
	for n := 1; n <= running; n++ {
		// One failure inside the lane: dead-lettered as a child, the lane moves on.
		k.add("run", n, "lane-run", 1, n == running/2)
	}
	for n := 0; n < 300; n++ {
		k.add("other", n, fmt.Sprintf("other-%d", n%30), int32(n%3), false)
	}
	var events eventLog
	s.produce(k.evs, &events)

	// The first lane: every follower accepted, none started (the first one
	// waits for the head).
	waitLane := laneID("lane-wait")
	var st workflows.LaneStatus
	require.Eventually(t, func() bool {
		var ok bool
		st, ok = s.laneStatus(waitLane)
		return ok && st.QueueLength >= waiting-1
	}, time.Minute, 100*time.Millisecond, "lane %s never held its events: %+v", waitLane, st)
	how := s.terminate(waitLane, "reliability: terminated while waiting for its head")
	r.fig("terminated_with", how)
	r.fig("wait_lane_queue_at_terminate", st.QueueLength)
	r.fig("wait_lane_done_at_terminate", st.Done)

	// The second lane: terminated half way through its events.
	runLane := laneID("lane-run")
	require.Eventually(t, func() bool {
		var ok bool
		st, ok = s.laneStatus(runLane)
		return ok && st.Done >= 10 && st.QueueLength >= 10
	}, 2*time.Minute, 50*time.Millisecond, "lane %s never ran part of its events with more queued: %+v", runLane, st)
	s.terminate(runLane, "reliability: terminated while running its events")
	r.fig("run_lane_queue_at_terminate", st.QueueLength)
	r.fig("run_lane_done_at_terminate", st.Done)
	terminatedAt := time.Now()

	var alerts []map[string]any
	noticed := func() bool {
		alerts = nil
		for _, l := range b.logEvents("projection_lane_lost") {
			if l["level"] == "ERROR" {
				alerts = append(alerts, l)
			}
		}
		return len(alerts) >= 2
	}
	for deadline := time.Now().Add(90 * time.Second); !noticed() && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
	}
	r.fig("alerts", len(alerts))
	if len(alerts) > 0 {
		r.fig("noticed_after_s", time.Since(terminatedAt).Round(100*time.Millisecond).Seconds())
		var redelivered []string
		for _, a := range alerts {
			redelivered = append(redelivered, fmt.Sprint(a["entityId"], ":", a["redelivered"]))
		}
		r.fig("redelivered", strings.Join(redelivered, ","))
	}
	if len(alerts) < 2 {
		t.Errorf("%d projection_lane_lost ERROR lines in the bridge log within 90 s of terminating 2 lanes; bridge log:\n%s",
			len(alerts), b.logTail(20))
	}

	evs := events.all()
	s.waitApplied(evs, 3*time.Minute)
	require.True(t, s.waitCommittedToEnd(time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b.logTail(30))
	s.waitDLQCount(3, time.Minute)
	blockedCleared := false
	for deadline := time.Now().Add(time.Minute); !blockedCleared && time.Now().Before(deadline); {
		blockedCleared = s.blockedKeys() == 0
		time.Sleep(time.Second)
	}
	r.fig("keys_unblocked", blockedCleared)
	time.Sleep(2 * time.Second)
	lost := b.metric("causet_bridge_lanes_lost_total")
	r.fig("bridge_lanes_lost", lost)
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(evs, true, true)
	r.verdict(v, true, true)
	checkOrder(t, r, s, evs, "lane-wait", "wait")
	checkOrder(t, r, s, evs, "lane-run", "run")
	require.GreaterOrEqual(t, lost, 2.0, "lanes_lost_total counts the terminated lanes")
	require.True(t, blockedCleared, "keys stay blocked after their recovered lanes ran")
}
