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

// A head the bridge ends (its run ended without an outcome) refuses any
// later attempt of its run; a head that recorded an outcome first is not
// ended; and an attempt under way holds EndHead off until it commits.
func TestEndHeadRefusesTheRunsLaterAttempts(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	block := func(entity, head string) {
		inTx(t, pool, func(tx pgx.Tx) error {
			return parking.Block(ctx, tx, "t", 0, []parking.Blocked{{Key: parking.Key{Projection: "p", ForkID: "f", EntityID: entity}, Head: head, State: parking.HeadActive}})
		})
	}
	block("u1", "run-1")
	block("u2", "run-2")
	block("u3", "run-3")

	inTx(t, pool, func(tx pgx.Tx) error {
		ended, st, err := parking.EndHead(ctx, tx, "run-1")
		require.True(t, ended)
		require.Equal(t, parking.HeadEnded, st)
		return err
	})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return parking.RefuseEnded(ctx, tx, "run-1") })
	require.ErrorIs(t, err, parking.ErrHeadEnded)
	inTx(t, pool, func(tx pgx.Tx) error { return parking.RefuseEnded(ctx, tx, "run-2") })

	_, err = parking.SetHeadState(ctx, pool, "run-2", parking.HeadSettled)
	require.NoError(t, err)
	inTx(t, pool, func(tx pgx.Tx) error {
		ended, st, err := parking.EndHead(ctx, tx, "run-2")
		require.False(t, ended, "a head with an outcome is not ended")
		require.Equal(t, parking.HeadSettled, st)
		return err
	})

	// run-3's attempt is committing: EndHead waits for it, then finds the
	// head settled.
	attempt, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, parking.RefuseEnded(ctx, attempt, "run-3"))
	_, err = parking.SetHeadState(ctx, attempt, "run-3", parking.HeadSettled)
	require.NoError(t, err)
	done := make(chan bool, 1)
	go func() {
		var ended bool
		_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			ended, _, err = parking.EndHead(ctx, tx, "run-3")
			return err
		})
		done <- ended
	}()
	select {
	case <-done:
		t.Fatal("EndHead did not wait for the attempt under way")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, attempt.Commit(ctx))
	require.False(t, <-done, "the attempt applied first: nothing to end")
}
