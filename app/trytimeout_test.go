package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/starter"
)

// The bridge's database try outlives the sessions' statement_timeout, so
// the server ends a slow statement first; no timeout or one it cannot read
// gives the default.
func TestDatabaseTryTimeoutFollowsTheStatementTimeout(t *testing.T) {
	for setting, want := range map[string]time.Duration{
		"":        65 * time.Second, // OpenPool's default, 60s
		"60s":     65 * time.Second,
		"2min":    125 * time.Second,
		"1500":    6500 * time.Millisecond,
		"250ms":   5250 * time.Millisecond,
		"0":       starter.DefaultDatabaseTryTimeout,
		"forever": starter.DefaultDatabaseTryTimeout,
	} {
		url := "postgres://u@127.0.0.1:1/db"
		if setting != "" {
			url += "?statement_timeout=" + setting
		}
		pool, err := app.OpenPool(context.Background(), url, 10*time.Second)
		require.NoError(t, err, setting)
		require.Equal(t, want, app.DatabaseTryTimeout(pool), "statement_timeout=%q", setting)
		pool.Close()
	}
}
