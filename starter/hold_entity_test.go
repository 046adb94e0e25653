package starter

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

// sequenced is ev with a per-entity sequence, as the write path (or any
// producer that numbers its events) sends it.
func sequenced(ev event.Envelope, seq int64) event.Envelope {
	ev.Sequence = seq
	return ev
}

// followHarness is a harness whose artist_followers lacks followed_at (every
// ARTIST_FOLLOWED fails, ARTIST_UNFOLLOWED deletes fine), with a worker and a
// two-attempt schedule.
func followHarness(t *testing.T) (*harness, Options) {
	h := newHarness(t, harnessOptions{partitions: 1, followersDDL: testenv.FollowersNoFollowedAtDDL})
	h.startWorker()
	o := h.options(nil)
	o.Retry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}
	o.MaxBackoff = 200 * time.Millisecond
	return h, o
}

func (h *harness) follows(user string) int {
	return h.count(`SELECT count(*) FROM artist_followers WHERE user_id = $1`, user)
}

func (h *harness) waitState(id string, want contract.State) contract.Status {
	h.t.Helper()
	var st contract.Status
	require.Eventually(h.t, func() bool {
		var err error
		st, err = h.status(id)
		return err == nil && st.State == want
	}, 60*time.Second, 100*time.Millisecond, "%s never reached %s (last %+v)", id, want, st)
	return st
}

// The seed's follow / unfollow case with CAUSET_DLQ_HOLD_ENTITY: the
// follow dead-letters (the table lacks followed_at) and the user's later
// unfollow stays parked behind the dead letter instead of applying; the
// status of the dead letter says one event waits behind it. The column is
// added and the follow replayed: it applies, the unfollow is released after
// it, and the user follows nobody, as the events say.
func TestBridgeKafkaHoldEntityParksBehindDeadLetter(t *testing.T) {
	h, o := followHarness(t)
	o.HoldEntity = true
	r := h.start(o)
	user := h.prefix + "user-hold"
	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 2)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	h.produce(envRecord(0, follow))
	head := contract.RetryWorkflowID("artist_followers", "production", follow.EventID)
	require.Eventually(t, func() bool { return h.blockedRows() == 1 }, 30*time.Second, 50*time.Millisecond)
	h.produce(envRecord(0, unfollow))
	st := h.waitState(head, contract.StateDeadLettered)
	require.NotNil(t, st.DLQ)

	time.Sleep(3 * headPoll)
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, 1, h.blockedRows(), "the dead letter holds its key")
	require.Equal(t, 1, h.count(`SELECT parked::int FROM causet_blocked_keys WHERE entity_id = $1`, user))
	require.EqualValues(t, 1, st.WaitingBehind, "the dead letter's status says one event waits behind it")
	require.EqualValues(t, 0, value(r.b.m.parkedEvents.WithLabelValues("released")))

	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, head, "", contract.SignalReplay, contract.ReplaySignal{Reason: "column added"}))
	h.waitState(head, contract.StateSucceeded)
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the replayed head released its key")
	require.Zero(t, h.follows(user), "follow then unfollow: the user follows nobody")
	require.EqualValues(t, 1, value(r.b.m.parkedEvents.WithLabelValues("released")))
	unblocked := h.logs.Containing("projection_key_unblocked")
	require.Len(t, unblocked, 1)
	require.Equal(t, user, unblocked[0]["entityId"])
}

// A dead-lettered follow replayed after a later unfollow of the same user,
// with 100 events of another type of the user between them, all produced
// straight to Kafka: the replay is refused (the run is dead-lettered again,
// saying why), and with force it applies.
func TestBridgeKafkaReplayRefusedPastALaterSequence(t *testing.T) {
	h, o := followHarness(t)
	h.start(o)
	user := h.prefix + "user-moved"
	follow := sequenced(followed(h.prefix+"follow", user, "artist-1"), 1)
	recs := []*kgo.Record{envRecord(0, follow)}
	for i := range 100 {
		recs = append(recs, envRecord(0, sequenced(unlisted(fmt.Sprintf("%sother-%d", h.prefix, i), user), int64(i+2))))
	}
	unfollow := sequenced(followed(h.prefix+"unfollow", user, "artist-1"), 102)
	unfollow.EventType = "ARTIST_UNFOLLOWED"
	recs = append(recs, envRecord(0, unfollow))
	h.produce(recs...)
	head := contract.RetryWorkflowID("artist_followers", "production", follow.EventID)
	h.waitState(head, contract.StateDeadLettered)
	require.Eventually(t, func() bool { return h.blockedRows() == 0 }, 30*time.Second, 50*time.Millisecond,
		"the dead letter lets its key go: the unfollow is released")
	require.Equal(t, 102, h.count(`SELECT sequence::int FROM causet_applied_sequences WHERE projection = 'artist_followers' AND entity_id = $1`, user),
		"the unfollow's sequence is the user's mark")

	_, err := h.pool.Exec(h.ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, head, "", contract.SignalReplay, contract.ReplaySignal{Reason: "column added"}))
	var st contract.Status
	require.Eventually(t, func() bool {
		var err error
		st, err = h.status(head)
		return err == nil && st.State == contract.StateDeadLettered && st.ReplayCount == 1
	}, 60*time.Second, 100*time.Millisecond)
	last := st.Attempts[len(st.Attempts)-1]
	require.Equal(t, string(contract.KindInvalidEvent), last.ErrorKind)
	require.Contains(t, last.Error, "replay refused")
	require.Contains(t, last.Error, "sequence 102")
	require.Zero(t, h.follows(user), "the refused replay brought nothing back")
	require.NotEmpty(t, h.logs.Containing("projection_replay_refused"))

	require.NoError(t, h.temporal.Client.SignalWorkflow(h.ctx, head, "", contract.SignalReplay, contract.ReplaySignal{Reason: "I know", Force: true}))
	h.waitState(head, contract.StateSucceeded)
	require.Equal(t, 1, h.follows(user), "forced, it applies")
}
