package reliability

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
)

// Scenarios of entity ordering (the default configuration) that only it
// has: a key blocked by a failure with thousands of events parked behind
// it, released while the bridge is killed, and many keys released while the
// group rebalances.

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

// parkedOf counts the events parked behind entity.
func (s *stack) parkedOf(entity string) int {
	return s.tryCount(fmt.Sprintf(`SELECT count(*) FROM causet_parked_events WHERE topic = '%s' AND entity_id = '%s'`, s.topic, entity))
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

// lastOf is the sequence of the last succeeding event of entity in evs.
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
// and 10,000 of the entity's events are parked behind it while other keys,
// on the hot key's partition and elsewhere, keep moving. Once the head is
// dead-lettered the parked events are released in runs; the bridge is
// killed with SIGKILL in the middle of the release and a new one resumes
// it from the table: every event applied once, in order, none by a
// workflow of its own.
func TestReliability9HotKey(t *testing.T) {
	p := gate(t)
	r := newResult(t, "hot_key/entity")
	hot := pick(p, 10_000, 10_000)
	s := newStack(t, stackOptions{partitions: 6})
	// The default schedule: the head retries for 15 s, in which the other
	// keys must move on.
	w := s.worker(nil)
	b := s.bridge(nil)

	const hotPart = 0
	k := &keyedEvents{s: s}
	var otherIDs, hotIDs []string
	head := k.add("hot", 0, "hot", hotPart, true)
	for n := 1; n < hot; n++ {
		hotIDs = append(hotIDs, k.add("hot", n, "hot", hotPart, false).id)
		if n%5 == 0 {
			// Another key on the hot partition, and one elsewhere.
			cold := k.add("cold", n, fmt.Sprintf("cold-%d", n%50), hotPart, false)
			warm := k.add("warm", n, fmt.Sprintf("warm-%d", n%50), int32(1+n%5), false)
			otherIDs = append(otherIDs, cold.id, warm.id)
		}
	}
	var events eventLog
	start := time.Now()
	s.produce(k.evs, &events)
	r.fig("hot_events", hot)
	r.fig("other_events", len(otherIDs))

	require.Eventually(t, func() bool { return s.appliedOf(otherIDs) == len(otherIDs) }, 3*time.Minute, 200*time.Millisecond,
		"other keys' events not applied; bridge log:\n%s", b.logTail(20))
	r.fig("others_applied_s", time.Since(start).Round(100*time.Millisecond).Seconds())
	st := s.waitHeadStatus(wfID(head.id), 30*time.Second)
	r.fig("head_state_when_others_applied", st.State)
	require.Equal(t, contract.StateRetrying, st.State, "other keys did not wait for the hot key's head")
	require.Zero(t, s.appliedOf(hotIDs), "a hot key event applied before its head settled")
	require.Eventually(t, func() bool { return s.parkedOf("hot") == hot-1 }, time.Minute, 100*time.Millisecond,
		"the hot key's events are parked behind its head: %d of %d", s.parkedOf("hot"), hot-1)

	// The release starts once the head is dead-lettered: kill the bridge in
	// the middle of it.
	var killedAt int
	require.Eventually(t, func() bool {
		killedAt = int(s.orderOf("hot").n)
		return killedAt > 0
	}, 2*time.Minute, 5*time.Millisecond, "the release never started; bridge log:\n%s", b.logTail(20))
	released := time.Now()
	b.kill()
	r.fig("applied_when_bridge_killed", killedAt)
	b = s.bridge(nil)
	require.Eventually(t, func() bool { return s.orderOf("hot").n == int64(hot-1) }, 3*time.Minute, 100*time.Millisecond,
		"the hot key's events not all released after the kill: %d of %d; bridge log:\n%s", s.orderOf("hot").n, hot-1, b.logTail(20))
	r.fig("release_with_kill_s", time.Since(released).Round(100*time.Millisecond).Seconds())
	require.True(t, s.waitCommittedToEnd(2*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b.logTail(30))
	s.waitDLQCount(1, time.Minute)
	require.Eventually(t, func() bool { return s.blockedKeys() == 0 }, time.Minute, 500*time.Millisecond,
		"the hot key stays blocked after its release")
	time.Sleep(2 * time.Second)
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
	checkOrder(t, r, s, events.all(), "hot", "hot")
	require.Zero(t, v.workflowsBehind, "no later event of the hot key needed a workflow of its own")
}

// Scenario 10: many keys released while the group rebalances. 300 keys
// each have a failing first event and 20 events parked behind it; once
// their heads are dead-lettered the releases run while a second bridge
// joins (the partitions move mid-release) and then the first one is killed
// with SIGKILL. Every parked event applied once, in order, by whoever owns
// its partition.
func TestReliability10ReleaseDuringRebalance(t *testing.T) {
	p := gate(t)
	r := newResult(t, "release_rebalance/entity")
	keys := pick(p, 300, 1000)
	const per = 20
	s := newStack(t, stackOptions{partitions: 6})
	s.env = shortSchedule
	w := s.worker(nil)
	b1 := s.bridge(nil)

	k := &keyedEvents{s: s}
	var parkedIDs []string
	entities := make([]string, keys)
	for i := range keys {
		entities[i] = fmt.Sprintf("key-%d", i)
		k.add("head", i, entities[i], int32(i)%s.partitions, true)
	}
	for n := 1; n <= per; n++ {
		for i := range keys {
			parkedIDs = append(parkedIDs, k.add(fmt.Sprintf("k%d", i), n, entities[i], int32(i)%s.partitions, false).id)
		}
	}
	var events eventLog
	s.produce(k.evs, &events)
	r.fig("keys", keys)
	r.fig("parked_events", len(parkedIDs))
	require.Eventually(t, func() bool { return s.parkedCount() == len(parkedIDs) }, 2*time.Minute, 100*time.Millisecond,
		"not every later event parked: %d of %d; bridge log:\n%s", s.parkedCount(), len(parkedIDs), b1.logTail(20))

	// The heads dead-letter after the short schedule (5 attempts a second
	// apart); as the first releases land, a second bridge joins.
	require.Eventually(t, func() bool { return s.appliedOf(parkedIDs) > 0 }, 2*time.Minute, 20*time.Millisecond,
		"no release started; bridge log:\n%s", b1.logTail(20))
	start := time.Now()
	b2 := s.bridge(nil)
	r.fig("applied_when_second_bridge_joined", s.appliedOf(parkedIDs))
	time.Sleep(2 * time.Second)
	r.fig("applied_when_first_bridge_killed", s.appliedOf(parkedIDs))
	b1.kill()
	require.Eventually(t, func() bool { return s.appliedOf(parkedIDs) == len(parkedIDs) }, 3*time.Minute, 100*time.Millisecond,
		"parked events not all released: %d of %d; bridge log:\n%s", s.appliedOf(parkedIDs), len(parkedIDs), b2.logTail(20))
	r.fig("release_through_rebalance_s", time.Since(start).Round(100*time.Millisecond).Seconds())
	require.True(t, s.waitCommittedToEnd(2*time.Minute), "offsets not committed to the end: %s\n%s", s.progress(), b2.logTail(30))
	s.waitDLQCount(int64(keys), 2*time.Minute)
	require.Eventually(t, func() bool { return s.blockedKeys() == 0 }, time.Minute, 500*time.Millisecond, "keys stay blocked")
	time.Sleep(2 * time.Second)
	require.False(t, b2.exited(), "bridge exited:\n%s", b2.logTail(30))
	require.False(t, w.exited(), "worker exited:\n%s", w.logTail(30))
	v := s.verify(events.all(), true, true)
	r.verdict(v, true, true)
	for _, e := range []string{entities[0], entities[keys/2], entities[keys-1]} {
		checkOrder(t, r, s, events.all(), e, e)
	}
}
