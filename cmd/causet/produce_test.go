package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestProduceKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "causet.events.v1")
	testenv.CreateTopic(t, brokers, topic, 3)
	t.Setenv("KAFKA_BROKERS", strings.Join(brokers, ","))
	t.Setenv("CAUSET_EVENTS_TOPIC", topic)

	file := filepath.Join(t.TempDir(), "events.jsonl")
	lines := []string{
		`{"eventId":"e1","eventType":"ARTIST_FOLLOWED","entityId":"user-1","forkId":"production","payload":{"artistId":"a"}}`,
		``,
		`{"eventId":"e2","eventType":"TRACK_PLAYED","entityId":"user-2","forkId":"production","payload":{"artistId":"a","plays":1,"days":0}}`,
		`{"eventId":"e3","eventType":"TRACK_PLAYED","entityId":"","forkId":"production","payload":{}}`,
		`not json`,
		`  {"eventId":"e4","eventType":"ARTIST_UNFOLLOWED","entityId":"user-1","forkId":"production","payload":{"artistId":"a"}}  `,
	}
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644))

	var stdout, stderr bytes.Buffer
	oldOut, oldErr := produceOut, produceErr
	produceOut, produceErr = &stdout, &stderr
	t.Cleanup(func() { produceOut, produceErr = oldOut, oldErr })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := produceCmd{File: file}.Run(ctx, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "2 of 5 lines are not valid event envelopes")
	require.Contains(t, stderr.String(), file+":4: invalid event: entityId is required")
	require.Contains(t, stderr.String(), file+":5: invalid event: not a JSON envelope")
	require.Contains(t, stdout.String(), "produced 3 events to "+topic+"; 2 invalid lines skipped")

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var got []string
	for len(got) < 3 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Key)+" "+string(r.Value)[:17])
		})
	}
	sort.Strings(got)
	require.Equal(t, []string{
		`user-1 {"eventId":"e1","`,
		`user-1 {"eventId":"e4","`,
		`user-2 {"eventId":"e2","`,
	}, got)

	// stdin, all valid: exit zero.
	oldIn := produceIn
	produceIn = strings.NewReader(lines[0] + "\n")
	t.Cleanup(func() { produceIn = oldIn })
	stdout.Reset()
	require.NoError(t, produceCmd{}.Run(ctx, slog.New(slog.DiscardHandler)))
	require.Contains(t, stdout.String(), "produced 1 events")
}
