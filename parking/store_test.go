package parking_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ev(entity, id string, offset int64) contract.RetryInput {
	return contract.RetryInput{Projection: "p", Source: contract.Source{Topic: "t", Offset: offset},
		Event: event.Envelope{EventID: id, EntityID: entity, ForkID: "f", EventType: "T", OccurredAt: time.Now().UTC(), Payload: json.RawMessage(`{}`)}}
}

func inTx(t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, fn))
}

// Parked events keep their order, each once (a batch read again after a
// restart parks nothing twice); their key counts them and remembers the
// highest offset taken.
func TestParkInOrderOnceWithCountsAndThrough(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := parking.NewStore(pool)
	key := parking.Key{Projection: "p", ForkID: "f", EntityID: "u1"}
	head := contract.RetryWorkflowID("p", "f", "e0")
	start := ev("u1", "e0", 10)
	inTx(t, pool, func(tx pgx.Tx) error {
		if err := parking.Block(ctx, tx, "t", 0, []parking.Blocked{{Key: key, Head: head, Through: 10, PendingStart: &start}}); err != nil {
			return err
		}
		inserted, err := parking.Park(ctx, tx, "t", 0, []contract.RetryInput{ev("u1", "e1", 11), ev("u1", "e2", 12), ev("u1", "e3", 13)})
		require.Equal(t, []bool{true, true, true}, inserted)
		return err
	})
	inTx(t, pool, func(tx pgx.Tx) error {
		inserted, err := parking.Park(ctx, tx, "t", 0, []contract.RetryInput{ev("u1", "e2", 12), ev("u1", "e4", 14)})
		require.Equal(t, []bool{false, true}, inserted, "only the new event is parked")
		return err
	})
	rows, err := parking.ParkedOf(ctx, pool, "t", 0, []parking.Key{key}, 10)
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.Retry.Event.EventID)
	}
	require.Equal(t, []string{"e1", "e2", "e3", "e4"}, ids, "parking order, each once")

	keys, err := s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, head, keys[0].Head)
	require.Equal(t, parking.HeadActive, keys[0].State)
	require.EqualValues(t, 4, keys[0].Parked)
	require.EqualValues(t, 14, keys[0].Through)
	require.NotNil(t, keys[0].PendingStart)
	require.Equal(t, "e0", keys[0].PendingStart.Event.EventID)
	before, err := s.Started(ctx, "t", 0, key, head)
	require.NoError(t, err)
	require.False(t, before, "a head that never dead-lettered")
	keys, err = s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.Nil(t, keys[0].PendingStart, "a started head has nothing pending")
	require.NoError(t, s.RecordDeadLetter(ctx, head, "run-1", 0, contract.DLQCoordinates{Topic: "dlq", Partition: 0, Offset: 7}))
	before, err = s.Started(ctx, "t", 0, key, head)
	require.NoError(t, err)
	require.True(t, before, "a head found again after its run dead-lettered")
	n, err := s.Behind(ctx, head)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	oldest, err := s.Oldest(ctx, "t", 0)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), oldest, time.Minute)

	// Unblock refuses a key with parked events left.
	gone, err := parking.Unblock(ctx, pool, "t", 0, keys)
	require.NoError(t, err)
	require.Empty(t, gone)
	inTx(t, pool, func(tx pgx.Tx) error {
		return parking.Unpark(ctx, tx, "t", 0, []int64{rows[0].Seq, rows[1].Seq})
	})
	keys, err = s.Load(ctx, "t", 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, keys[0].Parked)
	inTx(t, pool, func(tx pgx.Tx) error {
		return parking.Unpark(ctx, tx, "t", 0, []int64{rows[2].Seq, rows[3].Seq})
	})
	stale := keys[0]
	stale.Head = "projection-retry:p:f:other"
	gone, err = parking.Unblock(ctx, pool, "t", 0, []parking.Blocked{stale})
	require.NoError(t, err)
	require.Empty(t, gone, "a key whose head changed is not unblocked")
	gone, err = parking.Unblock(ctx, pool, "t", 0, keys)
	require.NoError(t, err)
	require.Equal(t, []parking.Key{key}, gone)
	oldest, err = s.Oldest(ctx, "t", 0)
	require.NoError(t, err)
	require.True(t, oldest.IsZero())
}

// A head's state moves forward only; Moved finds the keys whose head is in
// the states asked for; a key blocked again takes its new head and keeps its
// count and the higher Through.
func TestHeadStatesAndMoved(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := parking.NewStore(pool)
	a, b := parking.Key{Projection: "p", ForkID: "f", EntityID: "a"}, parking.Key{Projection: "p", ForkID: "f", EntityID: "b"}
	headA, headB := contract.RetryWorkflowID("p", "f", "a0"), contract.RetryWorkflowID("p", "f", "b0")
	inTx(t, pool, func(tx pgx.Tx) error {
		if err := parking.Block(ctx, tx, "t", 1, []parking.Blocked{{Key: a, Head: headA, Through: 5}, {Key: b, Head: headB, Through: 6}}); err != nil {
			return err
		}
		_, err := parking.Park(ctx, tx, "t", 1, []contract.RetryInput{ev("a", "a1", 7)})
		return err
	})
	moved, err := s.Moved(ctx, "t", []int32{1}, []parking.HeadState{parking.HeadSettled, parking.HeadDeadLettered})
	require.NoError(t, err)
	require.Empty(t, moved, "nothing has moved")

	waiting, err := parking.SetHeadState(ctx, pool, headA, parking.HeadDeadLettered)
	require.NoError(t, err)
	require.EqualValues(t, 1, waiting, "one event waits behind the dead letter")
	moved, err = s.Moved(ctx, "t", []int32{1}, []parking.HeadState{parking.HeadSettled})
	require.NoError(t, err)
	require.Empty(t, moved, "dead letters that hold their entity are not asked for")
	moved, err = s.Moved(ctx, "t", []int32{1}, []parking.HeadState{parking.HeadSettled, parking.HeadDeadLettered})
	require.NoError(t, err)
	require.Len(t, moved[1], 1)
	require.Equal(t, a, moved[1][0].Key)

	_, err = parking.SetHeadState(ctx, pool, headA, parking.HeadSettled)
	require.NoError(t, err)
	_, err = parking.SetHeadState(ctx, pool, headA, parking.HeadDeadLettered)
	require.NoError(t, err)
	keys, err := s.Load(ctx, "t", 1)
	require.NoError(t, err)
	for _, k := range keys {
		if k.Key == a {
			require.Equal(t, parking.HeadSettled, k.State, "a settled head is never taken back")
		}
	}

	// a fails again when released: its new head keeps the count, and the
	// higher offset wins.
	next := contract.RetryWorkflowID("p", "f", "a1")
	inTx(t, pool, func(tx pgx.Tx) error {
		return parking.Block(ctx, tx, "t", 1, []parking.Blocked{{Key: a, Head: next, Through: 3}})
	})
	keys, err = s.Load(ctx, "t", 1)
	require.NoError(t, err)
	for _, k := range keys {
		if k.Key == a {
			require.Equal(t, next, k.Head)
			require.Equal(t, parking.HeadActive, k.State)
			require.EqualValues(t, 1, k.Parked)
			require.EqualValues(t, 7, k.Through)
		}
	}
	listed, err := s.List(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, listed, 2)
	require.Equal(t, a, listed[0].Key, "the most parked events first")
	listed, err = s.List(ctx, "other", 10)
	require.NoError(t, err)
	require.Empty(t, listed)
}
