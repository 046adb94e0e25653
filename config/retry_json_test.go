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
