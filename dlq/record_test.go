package dlq

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
)

func TestRecordRoundTrip(t *testing.T) {
	ev := json.RawMessage(`{"eventId":"e1","eventType":"A","entityId":"u","forkId":"f","payload":{}}`)
	r := Record{Event: &ev, ProjectionName: "p", ForkID: "f", Error: "boom", ErrorKind: "sql", RetryCount: 5,
		Source: contract.Source{Topic: "t", Partition: 2, Offset: 9}}
	kr, err := r.KafkaRecord("dlq", []byte("u"))
	require.NoError(t, err)
	got, err := Decode(kr.Value)
	require.NoError(t, err)
	require.Equal(t, SchemaVersion, got.SchemaVersion)
	require.JSONEq(t, string(ev), string(*got.Event))
	require.Nil(t, got.Truncated)
	env, err := got.Envelope()
	require.NoError(t, err)
	require.Equal(t, "e1", env.EventID)
}

func TestRecordStaysWithinKafkaMessageSize(t *testing.T) {
	huge := []byte(strings.Repeat("x", 10<<20))
	bigEvent := json.RawMessage(`{"eventId":"e1","eventType":"A","entityId":"u","forkId":"f","payload":{"s":"` + strings.Repeat("y", 1<<20) + `"}}`)
	tests := []struct {
		name  string
		rec   Record
		field string
		whole []byte
	}{
		{"raw value of a poison record", Record{RawValue: huge, ErrorKind: "invalid_event"}, "rawValue", huge},
		{"raw value just over the base64 limit", Record{RawValue: huge[:800<<10], ErrorKind: "invalid_event"}, "rawValue", huge[:800<<10]},
		{"valid event that failed every attempt", Record{Event: &bigEvent, ErrorKind: "sql",
			Attempts: []contract.Attempt{{Number: 1, Error: strings.Repeat("e", 100<<10)}}}, "event", bigEvent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kr, err := tc.rec.KafkaRecord("dlq", nil)
			require.NoError(t, err)
			require.LessOrEqual(t, len(kr.Value), MaxValueBytes)
			got, err := Decode(kr.Value)
			require.NoError(t, err)
			require.NotNil(t, got.Truncated)
			sum := sha256.Sum256(tc.whole)
			require.Equal(t, Truncation{Field: tc.field, Size: len(tc.whole), SHA256: hex.EncodeToString(sum[:])}, *got.Truncated)
			require.NotEmpty(t, got.RawValue)
			require.Equal(t, tc.whole[:len(got.RawValue)], got.RawValue, "a prefix of the original")
			require.Greater(t, len(got.RawValue), 500<<10, "keeps as much as fits")
			for _, a := range got.Attempts {
				require.LessOrEqual(t, len(a.Error), maxErrorBytes+len("…"))
			}
			if tc.field == "event" {
				_, err := got.Envelope()
				require.ErrorIs(t, err, ErrNotReplayable)
				require.ErrorContains(t, err, "did not fit the record")
			}
		})
	}
}

func TestRecordKeyIsBounded(t *testing.T) {
	ev := json.RawMessage(`{"eventId":"e1","eventType":"A","entityId":"u","forkId":"f","payload":{}}`)
	bigEvent := json.RawMessage(`{"eventId":"e1","eventType":"A","entityId":"u","forkId":"f","payload":{"s":"` + strings.Repeat("y", 1<<20) + `"}}`)
	hexOf := func(b []byte) string {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	tests := []struct {
		name  string
		event *json.RawMessage
		key   []byte
		cut   bool // the key is replaced by its SHA-256
	}{
		{"no key", &ev, nil, false},
		{"short key", &ev, []byte("user-123"), false},
		{"key at the bound", &ev, bytes.Repeat([]byte("k"), MaxKeyBytes), false},
		{"key one byte over", &ev, bytes.Repeat([]byte("k"), MaxKeyBytes+1), true},
		{"binary key of 8 MiB", &ev, bytes.Repeat([]byte{0, 0xff, ':'}, 8<<20/3), true},
		{"long key and an event too large", &bigEvent, bytes.Repeat([]byte("k"), 4<<10), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{Event: tc.event, ProjectionName: "p", ForkID: "f", ErrorKind: "sql"}
			kr, err := r.KafkaRecord("dlq", tc.key)
			require.NoError(t, err)
			require.LessOrEqual(t, len(kr.Key), MaxKeyBytes)
			require.LessOrEqual(t, len(kr.Value), MaxValueBytes)
			got, err := Decode(kr.Value)
			require.NoError(t, err)
			require.Equal(t, len(*tc.event) > MaxValueBytes, got.Truncated != nil, "the event is cut independently of the key")
			if !tc.cut {
				require.Equal(t, tc.key, kr.Key)
				require.Nil(t, got.TruncatedKey)
				return
			}
			require.Equal(t, hexOf(tc.key), string(kr.Key))
			require.Equal(t, &Truncation{Field: "key", Size: len(tc.key), SHA256: hexOf(tc.key)}, got.TruncatedKey)
			require.Nil(t, r.TruncatedKey, "the caller's record is left as it was")

			again, err := r.KafkaRecord("dlq", tc.key)
			require.NoError(t, err)
			require.Equal(t, kr.Key, again.Key, "the same key gives the same short key")
			replayed, err := r.KafkaRecord("dlq", kr.Key)
			require.NoError(t, err)
			require.Equal(t, kr.Key, replayed.Key, "a short key is kept when a replay dead-letters again")
		})
	}
}
