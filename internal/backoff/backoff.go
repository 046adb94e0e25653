package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// The bounds every loop starts from unless configured otherwise.
const (
	DefaultMin = 100 * time.Millisecond
	DefaultMax = 10 * time.Second
)

// Backoff waits Min, then twice as long each time up to Max, each wait
// spread by ±20% so that many waiters do not retry in step. The zero value
// of cur starts at Min; Reset starts over.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(b.cur*2, b.Max)
	}
	return Jitter(b.cur)
}

// Jitter spreads d by ±20%.
func Jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Wait sleeps the next wait, or until ctx is done.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Waited reports whether a wait was taken since the start or the last Reset.
func (b *Backoff) Waited() bool { return b.cur != 0 }

// Reset makes the next wait Min again.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d, or until ctx is done (returning its error).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
