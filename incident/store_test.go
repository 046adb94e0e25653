package incident_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestStoreParksInOrderOnceAndOpensOnce(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := incident.NewStore(pool)
	in := contract.IncidentInput{Projection: "p", Fingerprint: "00000000000000aa", Policy: "hold"}
	id := contract.IncidentWorkflowID("p", in.Fingerprint)

	ev := func(n string) contract.RetryInput {
		return contract.RetryInput{Projection: "p", Event: event.Envelope{EventID: n, EntityID: "u1", ForkID: "f", EventType: "T",
			OccurredAt: time.Now().UTC(), Payload: json.RawMessage(`{}`)}}
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	holds, err := s.Open(ctx, tx, in)
	require.NoError(t, err)
	require.True(t, holds)
	inserted, err := s.Park(ctx, tx, []incident.Parked{
		{IncidentID: id, Topic: "t", Partition: 0, Retry: ev("e1")},
		{IncidentID: id, Topic: "t", Partition: 0, Retry: ev("e2")},
		{IncidentID: id, Topic: "t", Partition: 0, Retry: ev("e3")},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, inserted)
	require.NoError(t, tx.Commit(ctx))

	// A batch re-run after a crash parks the same events again: nothing changes.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	inserted, err = s.Park(ctx, tx, []incident.Parked{
		{IncidentID: id, Topic: "t", Partition: 0, Retry: ev("e2")},
		{IncidentID: id, Topic: "t", Partition: 0, Retry: ev("e4")},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, inserted, "only the new event is counted")
	require.NoError(t, tx.Commit(ctx))

	key := incident.Key{Projection: "p", ForkID: "f", EntityID: "u1"}
	rows, err := s.ParkedOf(ctx, "t", 0, []incident.Key{key}, 10)
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.Retry.Event.EventID)
	}
	require.Equal(t, []string{"e1", "e2", "e3", "e4"}, ids, "parking order, each once")
	keys, err := s.ParkedKeys(ctx, "t", 0)
	require.NoError(t, err)
	require.Equal(t, map[incident.Key]string{key: id}, keys)
	n, err := s.CountParked(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	// A releasing incident is not opened again until it settles.
	ok, err := s.SetState(ctx, id, contract.IncidentReleasing, contract.IncidentHolding)
	require.NoError(t, err)
	require.True(t, ok)
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	holds, err = s.Open(ctx, tx, in)
	require.NoError(t, err)
	require.False(t, holds)
	require.NoError(t, tx.Rollback(ctx))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Len(t, active, 1)
	require.Equal(t, contract.IncidentReleasing, active[0].State)

	require.NoError(t, s.Unpark(ctx, []int64{rows[0].Seq, rows[1].Seq, rows[2].Seq, rows[3].Seq}))
	left, err := s.WithParked(ctx, "t", 0, []incident.Key{key})
	require.NoError(t, err)
	require.Empty(t, left)
	ok, err = s.SetState(ctx, id, contract.IncidentResolved, contract.IncidentReleasing)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.SetState(ctx, id, contract.IncidentDeadLettered, contract.IncidentHolding)
	require.NoError(t, err)
	require.False(t, ok, "a resolved incident stays resolved")
}
