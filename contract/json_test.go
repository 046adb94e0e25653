package contract

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
)

func TestRetryInputJSONIsReadable(t *testing.T) {
	in := RetryInput{
		Event:      event.Envelope{EventID: "e-1", EventType: "ARTIST_FOLLOWED", EntityID: "fan-1", ForkID: "production", Payload: json.RawMessage(`{"a":1}`)},
		Projection: "artist_followers", Key: []byte("fan-1"), Mode: config.ModeInline, Retry: config.DefaultRetry(), ReplayWindow: 168 * time.Hour,
	}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "fan-1", m["keyText"])
	require.NotContains(t, m, "key")
	require.Equal(t, "168h0m0s", m["replayWindow"])
	require.Equal(t, map[string]any{"maxAttempts": 5.0, "initial": "1s", "multiplier": 2.0, "max": "30s"}, m["retry"])

	var back RetryInput
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, in, back)

	// A key that is not UTF-8 stays base64.
	in.Key = []byte{0xff, 0x00, 0x01}
	b, err = json.Marshal(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"key":"/wAB"`)
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, in.Key, back.Key)
}

// Inputs recorded before the readable form keep decoding (their histories
// replay).
func TestRetryInputReadsTheOlderForm(t *testing.T) {
	old := `{"event":{"eventId":"e-1","eventType":"T","entityId":"fan-1","forkId":"production","payload":{}},"projection":"p","key":"ZmFuLTE=",
		"source":{"topic":"t","partition":2,"offset":0},"mode":"inline",
		"retry":{"MaxAttempts":5,"Initial":1000000000,"Multiplier":2,"Max":30000000000},"replayWindow":604800000000000}`
	var in RetryInput
	require.NoError(t, json.Unmarshal([]byte(old), &in))
	require.Equal(t, []byte("fan-1"), in.Key)
	require.Equal(t, 168*time.Hour, in.ReplayWindow)
	require.Equal(t, config.DefaultRetry(), in.Retry)
}

func TestIncidentInputDurations(t *testing.T) {
	in := IncidentInput{Projection: "p", HoldMax: 24 * time.Hour, Retry: config.DefaultRetry(), Sample: event.Envelope{EventID: "e", Payload: json.RawMessage(`{}`)}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.Contains(t, string(b), `"holdMax":"24h0m0s"`)
	require.NotContains(t, string(b), `quietClose`)
	var back IncidentInput
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, in, back)
	require.NoError(t, json.Unmarshal([]byte(`{"holdMax":86400000000000,"quietClose":600000000000}`), &back))
	require.Equal(t, 24*time.Hour, back.HoldMax)
	require.Equal(t, 10*time.Minute, back.QuietClose)
}
