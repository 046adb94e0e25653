package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/payloadcodec"
	"github.com/causet/projection-retry/starter"
)

// TestEncryptedHistoryKafka runs a retry workflow to its dead letter with
// the worker and client that `causet worker` builds from CAUSET_PAYLOAD_KEYS,
// rotates the key (k2 current, k1 kept), restarts the worker, which replays
// the k1 history, and discards the dead letter. Read with a client without
// the codec, the raw history holds neither the event's payload nor the
// operator's reason, and every payload but the search attributes is
// encrypted, under k1 before the rotation and k2 after; with the codec the
// input decodes. The DLQ record stays plaintext (docs/ENCRYPTION.md).
func TestEncryptedHistoryKafka(t *testing.T) {
	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	dlqTopic := testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	cfg := load(t, map[string]string{
		"DATABASE_URL":        testenv.PostgresURL(t),
		"KAFKA_BROKERS":       brokers[0],
		"CAUSET_DLQ_TOPIC":    dlqTopic,
		"CAUSET_TASK_QUEUE":   testenv.TaskQueue(t),
		"CAUSET_METRICS_ADDR": freeAddr(t),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		artist = "artist-plaintext-7c41e9" // in the event's payload only
		reason = "reason-plaintext-d2b85f" // in the discard signal only
	)
	k1, k2 := testenv.RandomKey(t, config.PayloadKeySize), testenv.RandomKey(t, config.PayloadKeySize)
	ev := event.Envelope{
		EventID: "enc-" + cfg.TaskQueue, EventType: "ARTIST_FOLLOWED", EntityID: "user-1", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"` + artist + `"}`),
	}
	in := contract.RetryInput{
		Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeInline,
		Source:       contract.Source{Topic: "causet.events.v1", Partition: 0, Offset: 1},
		FirstAttempt: &contract.Attempt{Number: 1, StartedAt: time.Now().UTC(), ErrorKind: "sql", Error: "attempt 1 failed in the bridge"},
		Retry:        config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 2, Max: time.Second},
		ReplayWindow: time.Hour,
	}
	// Each open runs the setup: the table may be there already.
	setup := withFollowers(`CREATE TABLE IF NOT EXISTS artist_followers (user_id text NOT NULL, artist_id text NOT NULL, PRIMARY KEY (user_id, artist_id))`)
	open := func() *app.Service {
		svc, err := app.Open(ctx, cfg, app.WithLogger(quiet()), app.WithTemporalAddress(srv.HostPort), setup)
		require.NoError(t, err)
		w, err := svc.NewWorker()
		require.NoError(t, err)
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
		t.Cleanup(svc.Close)
		return svc
	}

	// Before the rotation: k1 only.
	t.Setenv(config.EnvPayloadKeys, "k1:"+k1)
	svc1 := open()
	require.Equal(t, "k1", svc1.Temporal.PayloadKeys.Current)
	run, err := svc1.Temporal.Client.ExecuteWorkflow(ctx, starter.StartOptions(cfg.TaskQueue, in), contract.RetryWorkflowName, in)
	require.NoError(t, err)
	id := in.WorkflowID()
	waitRetryState(t, ctx, svc1.Temporal.Client, id, contract.StateDeadLettered)
	svc1.Close()

	// After it: k2 encrypts, k1 still decrypts; the new worker replays the
	// k1 history from its start.
	t.Setenv(config.EnvPayloadKeys, "k1:"+k1+",k2:"+k2)
	t.Setenv(config.EnvPayloadKeyCurrent, "k2")
	svc2 := open()
	require.Equal(t, "k2", svc2.Temporal.PayloadKeys.Current)
	require.NoError(t, svc2.Temporal.Client.SignalWorkflow(ctx, id, "", contract.SignalDiscard, contract.OperatorSignal{Reason: reason}))
	var result contract.Status
	require.NoError(t, svc2.Temporal.Client.GetWorkflow(ctx, id, run.GetRunID()).Get(ctx, &result))
	require.Equal(t, contract.StateDiscarded, result.State)
	require.NotNil(t, result.LastAction)
	require.Equal(t, reason, result.LastAction.Reason, "the worker decrypted the k2 signal")
	require.Len(t, result.Attempts, 2)
	require.Positive(t, gauge(t, svc2, "causet_payload_encrypted_total", "k2"), "the signal and the result")
	require.Zero(t, gauge(t, svc2, "causet_payload_decrypt_failures_total", ""))

	// The raw history, read without the codec.
	events := history(t, ctx, srv.Client, id, run.GetRunID())
	var raw bytes.Buffer
	for _, e := range events {
		b, err := proto.Marshal(e)
		require.NoError(t, err)
		raw.Write(b)
	}
	require.Greater(t, raw.Len(), 0)
	for _, plain := range []string{artist, reason, `"artistId"`, `"startedAt"`} {
		require.NotContains(t, raw.String(), plain, "plaintext %q in the raw history", plain)
	}
	// Failure messages stay readable without the codec (docs/ENCRYPTION.md).
	require.Contains(t, raw.String(), `column "followed_at" of relation "artist_followers" does not exist`)
	byKey := map[string]int{}
	for _, p := range payloadsOutsideSearchAttributes(events) {
		require.Equal(t, payloadcodec.EncodingEncrypted, string(p.GetMetadata()[converter.MetadataEncoding]), "payload %v", p.GetMetadata())
		byKey[string(p.GetMetadata()[payloadcodec.MetadataKeyID])]++
	}
	t.Logf("encrypted payloads in the history by key ID: %v", byKey)
	require.Positive(t, byKey["k1"], "payloads written before the rotation")
	require.Positive(t, byKey["k2"], "payloads written after it")
	require.Len(t, byKey, 2)

	// The start input: unreadable without the codec, readable with it,
	// unreadable with k2 alone.
	startInput := events[0].GetWorkflowExecutionStartedEventAttributes().GetInput()
	var got contract.RetryInput
	require.ErrorContains(t, converter.GetDefaultDataConverter().FromPayloads(startInput, &got), "binary/encrypted")
	require.NoError(t, svc2.Temporal.DataConverter.FromPayloads(startInput, &got))
	require.JSONEq(t, string(ev.Payload), string(got.Event.Payload))
	k2Only, err := config.LoadPayloadKeys(func(k string) (string, bool) {
		if k == config.EnvPayloadKeys {
			return "k2:" + k2, true
		}
		return "", false
	})
	require.NoError(t, err)
	c2, err := payloadcodec.New(k2Only)
	require.NoError(t, err)
	err = payloadcodec.DataConverter(c2).FromPayloads(startInput, &got)
	var unknown *payloadcodec.UnknownKeyError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, "k1", unknown.ID)

	// The DLQ record is plaintext by design: the same envelope is on the
	// events topic, protected by the brokers' own TLS, SASL and ACLs.
	rec := firstDLQRecord(t, ctx, brokers, dlqTopic)
	require.NotNil(t, rec.Event)
	require.Contains(t, string(*rec.Event), artist)
}

// gauge is the value of the metric name (with key_id keyID when set) in
// svc's registry.
func gauge(t *testing.T, svc *app.Service, name, keyID string) float64 {
	t.Helper()
	mfs, err := svc.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if keyID == "" || l.GetName() == "key_id" && l.GetValue() == keyID {
					return m.GetCounter().GetValue()
				}
			}
			if keyID == "" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{key_id=%q}", name, keyID)
	return 0
}

func waitRetryState(t *testing.T, ctx context.Context, c client.Client, id string, want contract.State) {
	t.Helper()
	testenv.WaitQuery(t, ctx, c, id, contract.QueryStatus, 60*time.Second, func(st contract.Status) bool { return st.State == want })
}

func history(t *testing.T, ctx context.Context, c client.Client, id, runID string) []*historypb.HistoryEvent {
	t.Helper()
	var out []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		out = append(out, e)
	}
	require.NotEmpty(t, out)
	return out
}

// payloadsOutsideSearchAttributes are every Payload in the events except
// search attribute values, which Temporal indexes and the data converter
// never encodes.
func payloadsOutsideSearchAttributes(events []*historypb.HistoryEvent) []*commonpb.Payload {
	var out []*commonpb.Payload
	saName := (&commonpb.SearchAttributes{}).ProtoReflect().Descriptor().FullName()
	payloadName := (&commonpb.Payload{}).ProtoReflect().Descriptor().FullName()
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		switch m.Descriptor().FullName() {
		case saName:
			return
		case payloadName:
			out = append(out, m.Interface().(*commonpb.Payload))
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsMap():
				if fd.MapValue().Message() != nil {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { walk(mv.Message()); return true })
				}
			case fd.IsList():
				if fd.Message() != nil {
					for i := 0; i < v.List().Len(); i++ {
						walk(v.List().Get(i).Message())
					}
				}
			case fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	for _, e := range events {
		walk(e.ProtoReflect())
	}
	return out
}

func firstDLQRecord(t *testing.T, ctx context.Context, brokers []string, topic string) dlq.Record {
	t.Helper()
	recs := testenv.FirstRecords(t, ctx, brokers, topic, 20*time.Second)
	r, err := dlq.Decode(recs[0].Value)
	require.NoError(t, err)
	return r
}

// A bad CAUSET_PAYLOAD_KEYS stops DialTemporal before it dials, with one
// line naming the variable and none of the key.
func TestDialTemporalRefusesBadPayloadKeys(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	t.Setenv(config.EnvPayloadKeys, "k1:"+short)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := app.DialTemporal(ctx, quiet(), app.TemporalOptions{HostPort: "127.0.0.1:1"})
	require.EqualError(t, err, `CAUSET_PAYLOAD_KEYS is invalid: entry 1 (key ID "k1") is 16 bytes, not 32 (AES-256): want 32 random bytes in base64, such as from openssl rand -base64 32`)
	require.NotContains(t, err.Error(), strings.TrimRight(short, "="))

	// Keys given in the options win over the environment.
	_, err = app.DialTemporal(ctx, quiet(), app.TemporalOptions{HostPort: "127.0.0.1:1", PayloadKeys: &config.PayloadKeys{}})
	require.ErrorContains(t, err, "connect to Temporal at 127.0.0.1:1")
}
