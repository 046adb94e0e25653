package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDoublesToTheCapWithJitter(t *testing.T) {
	b := &Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for _, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		got := b.Next()
		require.GreaterOrEqual(t, got, want*8/10)
		require.LessOrEqual(t, got, want*12/10)
	}
	b.Reset()
	require.LessOrEqual(t, b.Next(), 120*time.Millisecond, "Reset starts at Min again")
}

func TestSleepStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	require.ErrorIs(t, Sleep(ctx, time.Hour), context.Canceled)
	require.Less(t, time.Since(start), time.Second)
	require.NoError(t, Sleep(context.Background(), 0))
}
