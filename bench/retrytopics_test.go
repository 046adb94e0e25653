package bench

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

func TestRetryTopology(t *testing.T) {
	topo := newRetryTopology("bench-x-rt1", "bench-x-dlq", ShortRetry)
	require.Equal(t, []string{"bench-x-rt1-retry-1", "bench-x-rt1-retry-2", "bench-x-rt1-retry-3", "bench-x-rt1-retry-4"}, topo.topics(),
		"one delay topic per retry of the schedule")
	for failed := 1; failed <= 4; failed++ {
		topic, delay, dead := topo.next(failed)
		require.Equal(t, topo.delayTopic(failed), topic)
		require.Equal(t, time.Second, delay)
		require.False(t, dead)
	}
	topic, _, dead := topo.next(5)
	require.Equal(t, "bench-x-dlq", topic, "the last attempt's failure is dead-lettered")
	require.True(t, dead)

	doubling := newRetryTopology("m", "d", config.Retry{MaxAttempts: 4, Initial: time.Second, Multiplier: 2, Max: 3 * time.Second})
	var delays []time.Duration
	for failed := 1; failed <= 3; failed++ {
		_, d, _ := doubling.next(failed)
		delays = append(delays, d)
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, delays, "topic k waits the schedule's k-th delay")

	once := newRetryTopology("m", "d", config.Retry{MaxAttempts: 1})
	require.Empty(t, once.topics())
	topic, _, dead = once.next(1)
	require.Equal(t, "d", topic)
	require.True(t, dead)
}

func TestRetryMetaRoundTrip(t *testing.T) {
	m := retryMeta{Attempt: 3, Projection: "bench_rows", Due: fixedNow.Add(time.Second), Err: "division by zero",
		Topic: "bench-x-rt1", Partition: 2, Offset: 12345}
	back, err := parseRetryMeta(m.headers())
	require.NoError(t, err)
	require.True(t, m.Due.Equal(back.Due))
	back.Due = m.Due
	require.Equal(t, m, back)

	_, err = parseRetryMeta(m.headers()[1:])
	require.ErrorContains(t, err, "no causet-retry-attempt header")
	bad := m.headers()
	bad[2].Value = []byte("soon")
	_, err = parseRetryMeta(bad)
	require.ErrorContains(t, err, "header causet-retry-due")
	_, err = parseRetryMeta(retryMeta{Attempt: 1, Projection: "p"}.headers())
	require.ErrorContains(t, err, "not a retry record", "attempt 1 is the events topic's")
}

func TestRetryForward(t *testing.T) {
	topo := newRetryTopology("bench-x-rt1", "bench-x-dlq", ShortRetry)
	rec, _ := record("bench-x-rt1", "p", 99, 1, fixedNow)
	rec.Partition, rec.Offset = 1, 99
	ev, err := event.Decode(rec.Value)
	require.NoError(t, err)
	origin := retryMeta{Attempt: 1, Projection: benchProjection, Topic: rec.Topic, Partition: 1, Offset: 99}

	// Attempt 1 failed on the events topic: to delay topic 1, for attempt 2.
	now := fixedNow.Add(time.Minute)
	out, dead, err := topo.forward(rec, origin, ev, "division by zero", now)
	require.NoError(t, err)
	require.False(t, dead)
	require.Equal(t, "bench-x-rt1-retry-1", out.Topic)
	require.Equal(t, rec.Key, out.Key)
	require.Equal(t, rec.Value, out.Value, "the event travels as it came")
	require.True(t, now.Equal(out.Timestamp))
	m, err := parseRetryMeta(out.Headers)
	require.NoError(t, err)
	require.Equal(t, 2, m.Attempt)
	require.True(t, out.Timestamp.Add(time.Second).Equal(m.Due), "due = timestamp + the topic's delay")
	require.Equal(t, "division by zero", m.Err)
	require.Equal(t, origin.Topic, m.Topic)
	require.Equal(t, int32(1), m.Partition)
	require.Equal(t, int64(99), m.Offset)

	// Attempt 4 failed on delay topic 3: to delay topic 4, the original kept.
	m.Attempt = 4
	out4, dead, err := topo.forward(&kgo.Record{Topic: "bench-x-rt1-retry-3", Key: out.Key, Value: out.Value, Offset: 7}, m, ev, "again", now)
	require.NoError(t, err)
	require.False(t, dead)
	require.Equal(t, "bench-x-rt1-retry-4", out4.Topic)
	m4, err := parseRetryMeta(out4.Headers)
	require.NoError(t, err)
	require.Equal(t, 5, m4.Attempt)
	require.Equal(t, int64(99), m4.Offset, "the original offset, not the delay topic's")

	// Attempt 5, the last, failed: to the DLQ with the peer's value.
	dl, dead, err := topo.forward(out4, m4, ev, "still", now)
	require.NoError(t, err)
	require.True(t, dead)
	require.Equal(t, "bench-x-dlq", dl.Topic)
	require.Equal(t, rec.Key, dl.Key)
	var v struct {
		SchemaVersion  int            `json:"schemaVersion"`
		Event          event.Envelope `json:"event"`
		ProjectionName string         `json:"projectionName"`
		Error          string         `json:"error"`
		RetryCount     int            `json:"retryCount"`
		Source         struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"source"`
	}
	require.NoError(t, json.Unmarshal(dl.Value, &v))
	require.Equal(t, 1, v.SchemaVersion)
	require.Equal(t, ev.EventID, v.Event.EventID)
	require.Equal(t, benchProjection, v.ProjectionName)
	require.Equal(t, "still", v.Error)
	require.Equal(t, 4, v.RetryCount, "the peer's count: attempts after the first")
	require.Equal(t, "bench-x-rt1", v.Source.Topic)
	require.Equal(t, int32(1), v.Source.Partition)
	require.Equal(t, int64(99), v.Source.Offset)
	mdl, err := parseRetryMeta(dl.Headers)
	require.NoError(t, err)
	require.Equal(t, 5, mdl.Attempt, "the DLQ record says which attempt failed last")
}

func TestRetryTopicsCheck(t *testing.T) {
	ok := retryTopicsStats{Main: 1000, Applied: 990, Forwarded: 10, Retried: 40, DeadLettered: 10}
	require.NoError(t, ok.check(1000, 10, 4))
	require.NoError(t, retryTopicsStats{Main: 500, Applied: 500}.check(500, 0, 4))

	short := ok
	short.Main = 999
	require.ErrorContains(t, short.check(1000, 10, 4), "999 of 1000 records")
	lost := ok
	lost.DeadLettered = 9
	require.ErrorContains(t, lost.check(1000, 10, 4), "= 999, want 1000")
	skipped := ok
	skipped.Retried = 39
	require.ErrorContains(t, skipped.check(1000, 10, 4), "39 records consumed from the delay topics, want 40")
}

func TestErrText(t *testing.T) {
	require.Equal(t, "", errText(projection.Result{}, nil))
	require.Equal(t, "down", errText(projection.Result{}, errors.New("down")))
	ae := &projection.ApplyError{Err: errors.New("division by zero")}
	require.Equal(t, "division by zero", errText(projection.Result{Err: ae}, errors.New("down")), "the pair's own error first")
}

func TestStoreMax(t *testing.T) {
	var a atomic.Int64
	storeMax(&a, 5)
	storeMax(&a, 3)
	require.Equal(t, int64(5), a.Load())
	storeMax(&a, 9)
	require.Equal(t, int64(9), a.Load())
}
