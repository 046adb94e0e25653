package contract

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Attempts between the last recorded one and the running one left no record
// of their own: they are shown lost, numbered, without a start time.
func TestRecordLostFillsTheAttemptsThatLeftNoRecord(t *testing.T) {
	t1 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	failed := Attempt{Number: 2, StartedAt: t1, ErrorKind: "ir_eval", Error: "division by zero"}
	lost := func(n, run int) Attempt {
		return Attempt{Number: n, Run: run, ErrorKind: string(KindSQL), Error: LostBeforeStarting}
	}

	require.Empty(t, RecordLost(nil, 2, 2, 0), "the activity's first attempt has none before it")
	require.Equal(t, []Attempt{failed}, RecordLost([]Attempt{failed}, 2, 3, 0), "no gap")
	require.Equal(t, []Attempt{failed, lost(3, 0), lost(4, 0)}, RecordLost([]Attempt{failed}, 2, 5, 0))
	require.Equal(t, []Attempt{lost(1, 1), lost(2, 1)}, RecordLost(nil, 1, 3, 1), "a replay's first attempts lost")

	// A lost attempt has no start time, and its record says so by leaving it out.
	raw, err := json.Marshal(lost(3, 0))
	require.NoError(t, err)
	require.NotContains(t, string(raw), "startedAt")
	raw, err = json.Marshal(failed)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"startedAt":"2026-12-07T12:00:00Z"`)
}
