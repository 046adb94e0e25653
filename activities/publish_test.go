package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

func deadLetterInput() contract.DeadLetterInput {
	t1 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	return contract.DeadLetterInput{
		Event:      followed("e1", "user-1", "artist-1"),
		Projection: projectionName,
		IRVersion:  3,
		Attempts: []contract.Attempt{
			{Number: 1, StartedAt: t1, ErrorKind: "sql", Error: "first"},
			{Number: 2, StartedAt: t1.Add(time.Second), ErrorKind: "ir_eval", Error: "last", IRVersion: 3},
		},
		ReplayCount: 1,
		Source:      contract.Source{Topic: "events", Partition: 2, Offset: 41},
	}
}

func TestPublishDeadLetterWritesTheRecord(t *testing.T) {
	pub := &fakePublisher{at: contract.DLQCoordinates{Topic: "dlq", Partition: 1, Offset: 7}}
	h := newHarness(t, nil, pub)
	in := deadLetterInput()
	before := time.Now().UTC()
	v, err := h.env.ExecuteActivity(contract.PublishDeadLetterActivity, in)
	require.NoError(t, err)
	var at contract.DLQCoordinates
	require.NoError(t, v.Get(&at))
	require.Equal(t, pub.at, at, "the activity returns where the record landed")

	require.Len(t, pub.records, 1)
	require.Equal(t, []byte("user-1"), pub.keys[0], "without a key the record is keyed by the entity")
	rec := pub.records[0]
	require.Equal(t, dlq.SchemaVersion, rec.SchemaVersion)
	require.Equal(t, projectionName, rec.ProjectionName)
	require.Equal(t, 3, rec.IRVersion)
	require.Equal(t, "ARTIST_FOLLOWED", rec.EventType)
	require.Equal(t, "user-1", rec.EntityID)
	require.Equal(t, "production", rec.ForkID)
	require.Equal(t, 2, rec.RetryCount)
	require.Equal(t, 1, rec.ReplayCount)
	require.Equal(t, "last", rec.Error, "the error is the last attempt's")
	require.Equal(t, "ir_eval", rec.ErrorKind)
	require.Equal(t, in.Attempts[0].StartedAt.UTC(), rec.FirstFailedAt)
	require.WithinRange(t, rec.DeadLetteredAt, before.Add(-time.Second), time.Now().UTC().Add(time.Second))
	require.Equal(t, in.Source, rec.Source)
	require.Len(t, rec.Attempts, 2)
	require.NotNil(t, rec.Event)
	var ev event.Envelope
	require.NoError(t, json.Unmarshal(*rec.Event, &ev))
	require.Equal(t, in.Event.EventID, ev.EventID)
	require.JSONEq(t, string(in.Event.Payload), string(ev.Payload))
	// The record names the workflow that dead-lettered the event.
	require.NotNil(t, rec.Workflow)
	require.NotEmpty(t, rec.Workflow.Namespace)
	require.NotEmpty(t, rec.Workflow.ID)
	require.NotEmpty(t, rec.Workflow.RunID)
}

// The DLQ's inflow is counted where the record lands, by projection and the
// error kind of the attempt that dead-lettered it; a failed publish (retried
// by the workflow) counts nothing.
func TestPublishDeadLetterCountsInflow(t *testing.T) {
	pub := &fakePublisher{err: errors.New("broker unavailable")}
	h := newHarness(t, nil, pub)
	_, err := h.env.ExecuteActivity(contract.PublishDeadLetterActivity, deadLetterInput())
	require.Error(t, err)
	require.Zero(t, total(t, h.reg, publishedTotal))
	pub.err = nil
	_, err = h.env.ExecuteActivity(contract.PublishDeadLetterActivity, deadLetterInput())
	require.NoError(t, err)
	require.Equal(t, 1.0, counter(t, h.reg, publishedTotal, map[string]string{"projection": projectionName, "error_kind": "ir_eval"}))
	require.Equal(t, 1.0, total(t, h.reg, publishedTotal))
}

func TestPublishDeadLetterKeepsTheRecordKey(t *testing.T) {
	pub := &fakePublisher{}
	h := newHarness(t, nil, pub)
	in := deadLetterInput()
	in.Key = []byte("original-key")
	_, err := h.env.ExecuteActivity(contract.PublishDeadLetterActivity, in)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("original-key")}, pub.keys)
}

// A publish failure is returned as a retryable error (the workflow's policy
// retries it until the topic accepts the record) and logged.
func TestPublishDeadLetterFailureIsRetried(t *testing.T) {
	pub := &fakePublisher{err: errors.New("broker unavailable")}
	h := newHarness(t, nil, pub)
	_, err := h.env.ExecuteActivity(contract.PublishDeadLetterActivity, deadLetterInput())
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "got %T", err)
	require.False(t, ae.NonRetryable())
	require.True(t, strings.Contains(ae.Error(), "broker unavailable"), ae.Error())
	line := onlyLine(t, h.logs, "dead letter publish failed; will retry")
	require.Equal(t, "WARN", line["level"])
	require.Equal(t, projectionName, line["projectionName"])
	require.Equal(t, "e1", line["eventId"])
	require.Equal(t, "broker unavailable", line["err"])
}

// PublishDeadLetter with the production publisher lands one DLQ record on
// the topic, keyed by the entity, that decodes to the dead letter.
func TestPublishDeadLetterToKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	h := newHarness(t, nil, &dlq.Publisher{Client: cl, Topic: topic})
	in := deadLetterInput()
	v, err := h.env.ExecuteActivity(contract.PublishDeadLetterActivity, in)
	require.NoError(t, err)
	var at contract.DLQCoordinates
	require.NoError(t, v.Get(&at))
	require.Equal(t, contract.DLQCoordinates{Topic: topic, Partition: 0, Offset: 0}, at)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "no record on %s", topic)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		recs = append(recs, fs.Records()...)
	}
	require.Len(t, recs, 1)
	require.Equal(t, "user-1", string(recs[0].Key))
	require.Equal(t, at.Offset, recs[0].Offset)
	rec, err := dlq.Decode(recs[0].Value)
	require.NoError(t, err)
	require.Equal(t, projectionName, rec.ProjectionName)
	require.Equal(t, "ir_eval", rec.ErrorKind)
	require.Equal(t, "last", rec.Error)
	require.Equal(t, 2, rec.RetryCount)
	require.Equal(t, in.Attempts[0].StartedAt.UTC(), rec.FirstFailedAt.UTC())
	require.Equal(t, in.Source, rec.Source)
	require.NotNil(t, rec.Workflow)
	headers := map[string]string{}
	for _, hd := range recs[0].Headers {
		headers[hd.Key] = string(hd.Value)
	}
	require.Equal(t, projectionName, headers[dlq.HeaderProjection])
	require.Equal(t, "ARTIST_FOLLOWED", headers[dlq.HeaderEventType])
	require.Equal(t, "2", headers[dlq.HeaderRetryCount])
	require.Equal(t, "ir_eval", headers[dlq.HeaderErrorKind])
}
