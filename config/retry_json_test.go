package config

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryJSONIsReadableAndReadsOlderPayloads(t *testing.T) {
	b, err := json.Marshal(DefaultRetry())
	require.NoError(t, err)
	require.JSONEq(t, `{"maxAttempts":5,"initial":"1s","multiplier":2,"max":"30s"}`, string(b))

	var r Retry
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, DefaultRetry(), r)

	var old Retry
	require.NoError(t, json.Unmarshal([]byte(`{"MaxAttempts":5,"Initial":1000000000,"Multiplier":2,"Max":30000000000}`), &old))
	require.Equal(t, DefaultRetry(), old, "payloads written before the change")

	require.ErrorContains(t, json.Unmarshal([]byte(`{"initial":"soon"}`), &r), `duration "soon"`)
	require.ErrorContains(t, json.Unmarshal([]byte(`{"initial":true}`), &r), "want a string")
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration(168 * time.Hour))
	require.NoError(t, err)
	require.Equal(t, `"168h0m0s"`, string(b))
	var d Duration
	require.NoError(t, json.Unmarshal([]byte(`604800000000000`), &d))
	require.Equal(t, Duration(168*time.Hour), d)
}

// A plan from attempt n goes on with the rest of the schedule: its first
// activity attempt is n, the server's retries wait the delays after it, and
// it has the attempts left.
func TestPlanFromAnAttempt(t *testing.T) {
	r := Retry{MaxAttempts: 5, Initial: 2 * time.Second, Multiplier: 2, Max: 10 * time.Second}
	p := r.Plan(ModeWorkflow)
	q := p.From(3)
	require.Equal(t, 3, q.FirstActivityAttempt)
	require.Zero(t, q.FirstWait)
	require.Equal(t, &ActivityRetry{InitialInterval: 8 * time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
		MaximumAttempts: 3}, q.Policy)
	require.Equal(t, p.Offsets, q.Offsets)
	last := r.Plan(ModeInline).From(5)
	require.EqualValues(t, 1, last.Policy.MaximumAttempts, "the last attempt alone")
	require.Nil(t, p.From(6).Policy, "past the last attempt: none left")
}
