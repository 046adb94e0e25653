package dlq

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

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

// headers maps a record's headers by name (each name once).
func headers(t *testing.T, kr *kgo.Record) map[string][]byte {
	t.Helper()
	h := map[string][]byte{}
	for _, kv := range kr.Headers {
		_, dup := h[kv.Key]
		require.False(t, dup, "header %s twice", kv.Key)
		h[kv.Key] = kv.Value
	}
	return h
}

// The Spring Kafka headers carry what Spring's DeadLetterPublishingRecoverer
// writes, in its encodings: strings in UTF-8, the partition as a 4-byte
// big-endian int, offset and timestamp (ms) as 8-byte big-endian longs, as
// Java's ByteBuffer.putInt/putLong write them.
func TestSpringDeadLetterHeaders(t *testing.T) {
	ts := time.Date(2026, 12, 2, 12, 0, 0, 123_000_000, time.UTC)
	r := Record{ProjectionName: "p", EventType: "A", ForkID: "f", ErrorKind: "sql", RetryCount: 5,
		Error:  `column "followed_at" does not exist`,
		Source: contract.Source{Topic: "causet.events.v1", Partition: 258, Offset: 1<<40 + 7, Timestamp: ts}}
	kr, err := r.kafkaRecord("dlq", []byte("u"), "causet-projection-worker")
	require.NoError(t, err)
	h := headers(t, kr)
	require.Equal(t, "causet.events.v1", string(h[HeaderDLTOriginalTopic]))
	require.Equal(t, []byte{0, 0, 1, 2}, h[HeaderDLTOriginalPartition])
	require.Equal(t, []byte{0, 0, 1, 0, 0, 0, 0, 7}, h[HeaderDLTOriginalOffset])
	require.Len(t, h[HeaderDLTOriginalTimestamp], 8)
	require.Equal(t, ts.UnixMilli(), int64(binary.BigEndian.Uint64(h[HeaderDLTOriginalTimestamp])))
	require.Equal(t, "causet-projection-worker", string(h[HeaderDLTOriginalConsumerGroup]))
	require.Equal(t, `column "followed_at" does not exist`, string(h[HeaderDLTExceptionMessage]))
	require.Equal(t, "sql", string(h[HeaderDLTExceptionFQCN]))
	// Ours are unchanged beside them.
	require.Equal(t, "258", string(h[HeaderSourcePartition]))
	require.Equal(t, "1099511627783", string(h[HeaderSourceOffset]))
	require.Equal(t, "sql", string(h[HeaderErrorKind]))
	got, err := Decode(kr.Value)
	require.NoError(t, err)
	require.True(t, ts.Equal(got.Source.Timestamp), "the value's source keeps the timestamp")

	// What is unknown is left out rather than invented; a long error is cut
	// as in the value.
	r.Source.Timestamp = time.Time{}
	r.Error = strings.Repeat("e", 100<<10)
	kr, err = r.KafkaRecord("dlq", nil)
	require.NoError(t, err)
	h = headers(t, kr)
	require.NotContains(t, h, HeaderDLTOriginalTimestamp)
	require.NotContains(t, h, HeaderDLTOriginalConsumerGroup)
	require.LessOrEqual(t, len(h[HeaderDLTExceptionMessage]), maxErrorBytes+len("…"))
	require.NotContains(t, string(kr.Value), `"timestamp"`, "no zero timestamp in the value")
}

// The publisher names the consumer group it is given, else the group its
// client consumes in (the bridge publishes with its group consumer).
func TestPublisherConsumerGroup(t *testing.T) {
	consumer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("t"))
	require.NoError(t, err)
	defer consumer.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer producer.Close()
	require.Equal(t, "g1", (&Publisher{Client: consumer}).group())
	require.Equal(t, "g2", (&Publisher{Client: consumer, ConsumerGroup: "g2"}).group())
	require.Equal(t, "", (&Publisher{Client: producer}).group())
	require.Equal(t, "g3", (&Publisher{Client: producer, ConsumerGroup: "g3"}).group())
}
