package bench

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
)

func TestRecord(t *testing.T) {
	decode := func(v []byte) event.Envelope {
		var ev event.Envelope
		require.NoError(t, json.Unmarshal(v, &ev))
		return ev
	}

	ok, f := record("topic", "run-inline1", 1003, 10, fixedNow)
	require.False(t, f)
	require.Equal(t, "topic", ok.Topic)
	require.Equal(t, "e-run-inline1-3", string(ok.Key), "successful events share 1000 entities")
	ev := decode(ok.Value)
	require.Equal(t, "run-inline1-0001003", ev.EventID)
	require.Equal(t, "e-run-inline1-3", ev.EntityID)
	require.Equal(t, benchEventType, ev.EventType)
	require.Equal(t, benchFork, ev.ForkID)
	require.True(t, fixedNow.Equal(ev.OccurredAt))
	require.JSONEq(t, `{"n":1004,"d":1}`, string(ev.Payload))

	bad, f := record("topic", "run-inline1", 9, 10, fixedNow)
	require.True(t, f, "at 10% every tenth event fails")
	require.Equal(t, "fail-run-inline1-0000009", string(bad.Key), "a failing event has an entity of its own")
	require.JSONEq(t, `{"n":10,"d":0}`, string(decode(bad.Value).Payload), "failing events divide by zero")

	// records is record for 0..n-1.
	recs, nf := records("topic", "p", 30, 10, fixedNow)
	require.Equal(t, 3, nf)
	for i, r := range recs {
		want, _ := record("topic", "p", i, 10, fixedNow)
		require.Equal(t, want, r)
	}
}

func TestPhaseEnv(t *testing.T) {
	env := phaseEnv("bench-x-handoff", "idle-q", retryEnv(longRetry))
	require.Equal(t, map[string]string{
		"CAUSET_EVENTS_TOPIC":                "bench-x-handoff",
		"CAUSET_CONSUMER_GROUP":              "bench-x-handoff-g",
		"CAUSET_TASK_QUEUE":                  "idle-q",
		"PROJECTION_WORKER_MAX_RETRIES":      "5",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "600000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "2",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "600000",
	}, env)
	require.Len(t, phaseEnv("t", "q", nil), 3)
}
