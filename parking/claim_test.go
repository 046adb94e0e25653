package parking_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

// One attempt at a time holds a dead letter's claim: another is told whom
// it waits for and how long, takes the claim over once its window has
// passed (and is told an earlier attempt held it), and the holder alone
// renews it. Each replay of a run is a dead letter of its own.
func TestDeadLetterClaimsHaveOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	s := parking.NewStore(testenv.Postgres(t))
	const wf, run = "projection-retry:p:f:e1", "run-1"

	first, err := s.ClaimDeadLetter(ctx, wf, run, 0, 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, parking.DeadLetterClaim{Taken: true}, first, "the first claim: nobody wrote before")

	second, err := s.ClaimDeadLetter(ctx, wf, run, 0, 2, time.Minute)
	require.NoError(t, err)
	require.False(t, second.Taken, "attempt 1's window has not passed")
	require.Equal(t, 1, second.Holder)
	require.Greater(t, second.Wait, time.Duration(0))
	require.LessOrEqual(t, second.Wait, time.Second)

	other, err := s.ClaimDeadLetter(ctx, wf, run, 1, 1, time.Minute)
	require.NoError(t, err)
	require.True(t, other.Taken, "replay 1 is another dead letter")

	time.Sleep(second.Wait + 50*time.Millisecond)
	renewed, err := s.RenewDeadLetterClaim(ctx, wf, run, 0, 1, time.Minute)
	require.NoError(t, err)
	require.False(t, renewed, "a claim whose window passed is not renewed")

	third, err := s.ClaimDeadLetter(ctx, wf, run, 0, 3, time.Minute)
	require.NoError(t, err)
	require.Equal(t, parking.DeadLetterClaim{Taken: true, Earlier: true}, third, "taken over: attempt 1 may have written")

	renewed, err = s.RenewDeadLetterClaim(ctx, wf, run, 0, 1, time.Minute)
	require.NoError(t, err)
	require.False(t, renewed, "attempt 1 no longer holds it")
	renewed, err = s.RenewDeadLetterClaim(ctx, wf, run, 0, 3, time.Minute)
	require.NoError(t, err)
	require.True(t, renewed, "the holder renews")

	fourth, err := s.ClaimDeadLetter(ctx, wf, run, 0, 4, time.Minute)
	require.NoError(t, err)
	require.False(t, fourth.Taken)
	require.Equal(t, 3, fourth.Holder)
	require.Greater(t, fourth.Wait, 50*time.Second, "renewed for a whole window")

	require.NoError(t, s.ShortenDeadLetterClaim(ctx, wf, run, 0, 4, time.Second))
	fifth, err := s.ClaimDeadLetter(ctx, wf, run, 0, 5, time.Minute)
	require.NoError(t, err)
	require.Greater(t, fifth.Wait, 50*time.Second, "only the holder shortens its claim")
	require.NoError(t, s.ShortenDeadLetterClaim(ctx, wf, run, 0, 3, time.Second))
	fifth, err = s.ClaimDeadLetter(ctx, wf, run, 0, 5, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 3, fifth.Holder)
	require.LessOrEqual(t, fifth.Wait, time.Second, "shortened")
	require.NoError(t, s.ShortenDeadLetterClaim(ctx, wf, run, 0, 3, time.Hour))
	fifth, err = s.ClaimDeadLetter(ctx, wf, run, 0, 5, time.Minute)
	require.NoError(t, err)
	require.LessOrEqual(t, fifth.Wait, time.Second, "never lengthened")
}
