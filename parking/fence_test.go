package parking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

// Each claim of a partition takes the next epoch; a transaction that checks
// an older claim fails with ErrFenced, and a claim waits for a transaction
// that checked the current one, so what that owner commits comes before it.
func TestClaimFencesTheOlderOwner(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	a, err := parking.Claim(ctx, pool, "g", "t", 0, "bridge-a")
	require.NoError(t, err)
	require.EqualValues(t, 1, a.Epoch)
	other, err := parking.Claim(ctx, pool, "g", "t", 1, "bridge-a")
	require.NoError(t, err)
	require.EqualValues(t, 1, other.Epoch, "partitions are claimed apart")
	inTx(t, pool, func(tx pgx.Tx) error { return a.Check(ctx, tx) })

	// A's transaction holds its check while B claims: B waits for it.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Check(ctx, tx))
	claimed := make(chan parking.Owner, 1)
	go func() {
		b, err := parking.Claim(ctx, pool, "g", "t", 0, "bridge-b")
		if err == nil {
			claimed <- b
		}
		close(claimed)
	}()
	select {
	case <-claimed:
		t.Fatal("the claim did not wait for the transaction that checked the older one")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	b, ok := <-claimed
	require.True(t, ok)
	require.EqualValues(t, 2, b.Epoch)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return a.Check(ctx, tx) })
	require.True(t, errors.Is(err, parking.ErrFenced), "%v", err)
	inTx(t, pool, func(tx pgx.Tx) error { return b.Check(ctx, tx) })
	inTx(t, pool, func(tx pgx.Tx) error { return other.Check(ctx, tx) })
}
