package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func testRecord(i int, projection, eventType, fork, kind string, at time.Time) dlq.Record {
	ev := json.RawMessage(fmt.Sprintf(`{"eventId":"ev-%d","eventType":%q,"entityId":"user-%d","forkId":%q,"payload":{}}`, i, eventType, i, fork))
	return dlq.Record{
		Event: &ev, ProjectionName: projection, IRVersion: 1, EventType: eventType, EntityID: fmt.Sprintf("user-%d", i),
		ForkID: fork, Error: "boom " + kind, ErrorKind: kind, RetryCount: 5,
		Attempts:      []contract.Attempt{{Number: 1, StartedAt: at.Add(-time.Second), ErrorKind: kind, Error: "boom"}},
		FirstFailedAt: at.Add(-time.Second), DeadLetteredAt: at,
		Source: contract.Source{Topic: "causet.events.v1", Partition: 0, Offset: int64(i)},
	}
}

func readAll(t *testing.T, o dlq.ReaderOptions) []dlq.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := dlq.NewReader(ctx, o)
	require.NoError(t, err)
	defer r.Close()
	var items []dlq.Item
	require.NoError(t, r.Read(ctx, func(it dlq.Item) error {
		items = append(items, it)
		return nil
	}))
	return items
}

func eventIDs(t *testing.T, items []dlq.Item) []string {
	t.Helper()
	var ids []string
	for _, it := range items {
		if it.Err != nil {
			ids = append(ids, "err")
			continue
		}
		env, err := it.Record.Envelope()
		require.NoError(t, err)
		ids = append(ids, env.EventID)
	}
	return ids
}

func TestKafkaReaderFilters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	pub := &dlq.Publisher{Client: cl, Topic: topic}

	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	recs := []dlq.Record{
		testRecord(0, "artist_followers", "ARTIST_FOLLOWED", "production", "sql", base),
		testRecord(1, "artist_followers", "ARTIST_UNFOLLOWED", "production", "sql", base.Add(time.Minute)),
		testRecord(2, "play_stats", "TRACK_PLAYED", "production", "ir_eval", base.Add(2*time.Minute)),
		testRecord(3, "artist_followers", "ARTIST_FOLLOWED", "staging", "connection", base.Add(3*time.Minute)),
	}
	for i, r := range recs {
		at, err := pub.Publish(ctx, []byte(fmt.Sprintf("user-%d", i)), r)
		require.NoError(t, err)
		require.EqualValues(t, i, at.Offset)
	}
	// A record from a newer schema: reported, never guessed.
	future := &kgo.Record{Topic: topic, Key: []byte("user-9"), Value: []byte(`{"schemaVersion":2,"projectionName":"artist_followers"}`),
		Headers: []kgo.RecordHeader{{Key: dlq.HeaderProjection, Value: []byte("artist_followers")}, {Key: dlq.HeaderErrorKind, Value: []byte("sql")}}}
	require.NoError(t, cl.ProduceSync(ctx, future).FirstErr())

	all := readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic})
	require.Equal(t, []string{"ev-0", "ev-1", "ev-2", "ev-3", "err"}, eventIDs(t, all))
	require.Equal(t, "user-1", string(all[1].Key))
	require.Equal(t, topic, all[1].Topic)
	require.EqualValues(t, 1, all[1].Offset)
	require.Equal(t, "ARTIST_UNFOLLOWED", all[1].Headers[dlq.HeaderEventType])
	var uv *dlq.UnsupportedVersionError
	require.True(t, errors.As(all[4].Err, &uv))
	require.Equal(t, 2, uv.Version)
	require.EqualValues(t, 4, all[4].Offset)

	for _, tc := range []struct {
		name   string
		filter dlq.Filter
		want   []string
	}{
		{"projection", dlq.Filter{Projection: "artist_followers"}, []string{"ev-0", "ev-1", "ev-3", "err"}},
		{"event type", dlq.Filter{EventType: "ARTIST_FOLLOWED"}, []string{"ev-0", "ev-3", "err"}},
		{"fork", dlq.Filter{ForkID: "staging"}, []string{"ev-3", "err"}},
		{"error kind", dlq.Filter{ErrorKind: "ir_eval"}, []string{"ev-2"}},
		{"combined", dlq.Filter{Projection: "artist_followers", ForkID: "production", EventType: "ARTIST_FOLLOWED"}, []string{"ev-0", "err"}},
		{"until", dlq.Filter{Until: base.Add(2 * time.Minute)}, []string{"ev-0", "ev-1", "err"}},
		{"range", dlq.Filter{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute), ErrorKind: "sql"}, []string{"ev-1", "err"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, eventIDs(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Filter: tc.filter})))
		})
	}

	t.Run("from offset", func(t *testing.T) {
		require.Equal(t, []string{"ev-2", "ev-3", "err"}, eventIDs(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Start: dlq.FromOffset(2)})))
		require.Equal(t, []string{"ev-3"}, eventIDs(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Start: dlq.FromOffsets(map[int32]int64{0: 3}), Filter: dlq.Filter{ErrorKind: "connection"}})))
		require.Empty(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Start: dlq.FromOffset(99)}))
	})

	t.Run("from time", func(t *testing.T) {
		// Kafka timestamps are produce times: all of the above are before cut.
		time.Sleep(20 * time.Millisecond)
		cut := time.Now()
		time.Sleep(20 * time.Millisecond)
		_, err := pub.Publish(ctx, []byte("user-5"), testRecord(5, "artist_followers", "ARTIST_FOLLOWED", "production", "sql", time.Now()))
		require.NoError(t, err)
		require.Equal(t, []string{"ev-5"}, eventIDs(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Start: dlq.FromTime(cut)})))
		require.Empty(t, readAll(t, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Start: dlq.FromTime(time.Now().Add(time.Hour))}))
	})
}

func TestKafkaReaderStopsAtEndUnlessFollowing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, topic, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	pub := &dlq.Publisher{Client: cl, Topic: topic}
	now := time.Now().UTC()
	for i := range 6 {
		_, err := pub.Publish(ctx, []byte(fmt.Sprintf("user-%d", i)), testRecord(i, "p", "E", "production", "sql", now))
		require.NoError(t, err)
	}

	// Not following: records produced after NewReader are not read.
	r, err := dlq.NewReader(ctx, dlq.ReaderOptions{Brokers: brokers, Topic: topic})
	require.NoError(t, err)
	defer r.Close()
	require.EqualValues(t, 6, r.Pending())
	_, err = pub.Publish(ctx, []byte("user-late"), testRecord(6, "p", "E", "production", "sql", now))
	require.NoError(t, err)
	n := 0
	require.NoError(t, r.Read(ctx, func(dlq.Item) error { n++; return nil }))
	require.Equal(t, 6, n)

	// Following: later records arrive until the context ends.
	fr, err := dlq.NewReader(ctx, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Follow: true, Start: dlq.FromTime(time.Now().Add(time.Hour))})
	require.NoError(t, err)
	defer fr.Close()
	fctx, fcancel := context.WithCancel(ctx)
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- fr.Read(fctx, func(it dlq.Item) error {
			env, err := it.Record.Envelope()
			if err != nil {
				return err
			}
			got <- env.EventID
			return nil
		})
	}()
	time.Sleep(200 * time.Millisecond)
	_, err = pub.Publish(ctx, []byte("user-7"), testRecord(7, "p", "E", "production", "sql", time.Now()))
	require.NoError(t, err)
	select {
	case id := <-got:
		require.Equal(t, "ev-7", id)
	case <-time.After(15 * time.Second):
		t.Fatal("follow did not see the new record")
	}
	fcancel()
	require.NoError(t, <-done)
}
