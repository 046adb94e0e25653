package contract

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
)

func TestApplyInputDelaysReadAsDurations(t *testing.T) {
	in := ApplyInput{Event: event.Envelope{EventID: "e", Payload: json.RawMessage(`{}`)}, Projection: "p", FirstAttempt: 2,
		Delays: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, MaxAttempts: 5}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"delays":["1s","2s","4s","8s"]`)
	var back ApplyInput
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, in, back)

	require.NoError(t, json.Unmarshal([]byte(`{"projection":"p","delays":[1000000000,2000000000],"maxAttempts":3}`), &back))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, back.Delays, "inputs scheduled before still decode")
}
