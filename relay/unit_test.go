package relay

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadSettings(t *testing.T) {
	s, err := LoadSettings(env())
	require.NoError(t, err)
	require.Equal(t, Settings{Batch: 500, PollInterval: 100 * time.Millisecond}, s)

	s, err = LoadSettings(env("CAUSET_RELAY_BATCH", " 50 ", "CAUSET_RELAY_POLL_INTERVAL", "1s"))
	require.NoError(t, err)
	require.Equal(t, Settings{Batch: 50, PollInterval: time.Second}, s)

	for _, tc := range []struct{ key, value, want string }{
		{"CAUSET_RELAY_BATCH", "abc", `CAUSET_RELAY_BATCH="abc" is invalid: want an integer from 1 to 10000 (rows per batch)`},
		{"CAUSET_RELAY_BATCH", "0", `CAUSET_RELAY_BATCH="0" is invalid`},
		{"CAUSET_RELAY_BATCH", "10001", `CAUSET_RELAY_BATCH="10001" is invalid`},
		{"CAUSET_RELAY_BATCH", "", `CAUSET_RELAY_BATCH="" is invalid`},
		{"CAUSET_RELAY_POLL_INTERVAL", "100", `CAUSET_RELAY_POLL_INTERVAL="100" is invalid: want a Go duration from 1ms to 1m, such as 100ms or 1s`},
		{"CAUSET_RELAY_POLL_INTERVAL", "0s", `CAUSET_RELAY_POLL_INTERVAL="0s" is invalid`},
		{"CAUSET_RELAY_POLL_INTERVAL", "2m", `CAUSET_RELAY_POLL_INTERVAL="2m" is invalid`},
	} {
		_, err := LoadSettings(env(tc.key, tc.value))
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "\n")
	}
}

func TestNewValidates(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://u@127.0.0.1:1/db")
	require.NoError(t, err) // connects lazily
	defer pool.Close()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Brokers: []string{"b:9092"}}, "Options.Pool is required"},
		{Options{Pool: pool}, "Options.Brokers is required"},
		{Options{Pool: pool, Brokers: []string{"b:9092"}, Batch: MaxBatch + 1}, "Options.Batch is 10001"},
		{Options{Pool: pool, Brokers: []string{"b:9092"}, MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
	} {
		_, err := New(tc.opts)
		require.ErrorContains(t, err, tc.want)
	}

	reg := prometheus.NewRegistry()
	r, err := New(Options{Pool: pool, Brokers: []string{"b:9092"}, Registerer: reg})
	require.NoError(t, err)
	defer r.closeProducer()
	require.Equal(t, DefaultBatch, r.opts.Batch)
	require.Equal(t, "causet.events.v1", r.opts.Topic)
	_, err = New(Options{Pool: pool, Brokers: []string{"b:9092"}, Registerer: reg})
	require.ErrorContains(t, err, "register metrics", "a second relay on one registry")
}

func TestAckedPrefix(t *testing.T) {
	rows := []row{
		{position: 1, forkID: "main", entityID: "a"},
		{position: 2, forkID: "main", entityID: "b"},
		{position: 3, forkID: "main", entityID: "a"},
		{position: 4, forkID: "f2", entityID: "a"},
		{position: 5, forkID: "main", entityID: "a"},
		{position: 6, forkID: "main", entityID: "b"},
	}
	// a's second event failed: its third, though acknowledged, waits.
	acked := []bool{true, true, false, true, true, true}
	require.Equal(t, []int64{1, 2, 4, 6}, ackedPrefix(rows, acked))
	require.Empty(t, ackedPrefix(rows, make([]bool, len(rows))))
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, allPositions(rows))
}

func TestRecordValue(t *testing.T) {
	// As jsonb gives it back: keys by length, spaces after separators.
	stored := `{"forkId": "main", "payload": {"qty": 2, "item": "i-1"}, "eventId": "in-1:1", "entityId": "cart-1", "intentId": "in-1", "sequence": 1, "eventType": "ITEM_ADDED", "occurredAt": "2026-12-01T10:00:00.123456Z"}`
	got := recordValue([]byte(stored))
	require.Equal(t, `{"eventId":"in-1:1","eventType":"ITEM_ADDED","entityId":"cart-1","forkId":"main","intentId":"in-1","sequence":1,"occurredAt":"2026-12-01T10:00:00.123456Z","payload":{"qty":2,"item":"i-1"}}`, string(got))
	e, err := event.Decode(got)
	require.NoError(t, err)
	require.Equal(t, int64(1), e.Sequence)

	// Not an envelope: sent as stored, for the bridge to dead-letter.
	require.Equal(t, `{"eventId": 7}`, string(recordValue([]byte(`{"eventId": 7}`))))
	require.True(t, json.Valid(recordValue([]byte(`[1, 2]`))))
}
