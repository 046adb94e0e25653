package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/internal/testenv"
)

func TestDLQFlagParsing(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	got, err := parseWhen("--since", "2h", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-2*time.Hour), got)
	got, err = parseWhen("--since", "2026-12-01T10:00:00Z", now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), got)
	_, err = parseWhen("--until", "yesterday", now)
	require.ErrorContains(t, err, `--until="yesterday" is invalid`)

	p, err := parseOffsets("42")
	require.NoError(t, err)
	require.Equal(t, dlq.FromOffset(42), p)
	p, err = parseOffsets("0:5, 2:7")
	require.NoError(t, err)
	require.Equal(t, dlq.FromOffsets(map[int32]int64{0: 5, 2: 7}), p)
	for _, bad := range []string{"-1", "x", "0:", "a:1", "1:-2"} {
		_, err = parseOffsets(bad)
		require.ErrorContains(t, err, "--from-offset", bad)
	}

	r, err := parseRate("20/s")
	require.NoError(t, err)
	require.Equal(t, 20.0, r)
	r, err = parseRate("2.5")
	require.NoError(t, err)
	require.Equal(t, 2.5, r)
	_, err = parseRate("0/s")
	require.ErrorContains(t, err, `--rate="0/s" is invalid`)

	require.Equal(t, "a b", truncate("a\n  b", 10))
	require.Equal(t, "abcd…", truncate("abcdefgh", 5))
}

func TestDLQCommandParses(t *testing.T) {
	var c struct {
		DLQ dlqCmd `cmd:"" name:"dlq"`
	}
	parser, err := kong.New(&c, kong.Exit(func(int) { t.Fatal("exit") }))
	require.NoError(t, err)
	kctx, err := parser.Parse([]string{"dlq", "tail", "--projection", "p", "--event-type", "E", "--fork", "f", "--error-kind", "sql",
		"--since", "2h", "--until", "1h", "--from-offset", "0:3", "--json", "-f", "--no-state"})
	require.NoError(t, err)
	require.Equal(t, "dlq tail", kctx.Command())
	require.Equal(t, dlqTailCmd{dlqSelect: dlqSelect{Projection: "p", EventType: "E", Fork: "f", ErrorKind: "sql", Since: "2h", Until: "1h", FromOffset: "0:3"},
		JSON: true, Follow: true, NoState: true}, c.DLQ.Tail)
	kctx, err = parser.Parse([]string{"dlq", "replay", "--projection", "p", "--dry-run", "--rate", "5/s", "--limit", "10", "--reason", "fixed"})
	require.NoError(t, err)
	require.Equal(t, "dlq replay", kctx.Command())
	require.Equal(t, dlqReplayCmd{dlqSelect: dlqSelect{Projection: "p"}, DryRun: true, Rate: "5/s", Limit: 10, Reason: "fixed"}, c.DLQ.Replay)
	require.True(t, strings.HasPrefix(c.DLQ.Replay.replayIdentity(), "causet-dlq-replay:"), "without --identity, the user and host")
	_, err = parser.Parse([]string{"dlq", "replay", "--reason", "fixed", "--identity", "alice@ops"})
	require.NoError(t, err)
	require.Equal(t, "alice@ops", c.DLQ.Replay.replayIdentity())
}

func publishTestDLQ(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	pub := &dlq.Publisher{Client: cl, Topic: topic}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for i, kind := range []string{"sql", "ir_eval"} {
		ev := json.RawMessage(fmt.Sprintf(`{"eventId":"ev-%d","eventType":"ARTIST_FOLLOWED","entityId":"user-%d","forkId":"production","payload":{}}`, i, i))
		_, err := pub.Publish(context.Background(), []byte(fmt.Sprintf("user-%d", i)), dlq.Record{
			Event: &ev, ProjectionName: "artist_followers", EventType: "ARTIST_FOLLOWED", EntityID: fmt.Sprintf("user-%d", i),
			ForkID: "production", ErrorKind: kind, RetryCount: 5, DeadLetteredAt: at.Add(time.Duration(i) * time.Minute),
			Error: `column "followed_at" of relation "artist_followers" does not exist ` + strings.Repeat("x", 80),
		})
		require.NoError(t, err)
	}
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte(`{"schemaVersion":7}`)}).FirstErr())
}

func TestKafkaDLQTail(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	publishTestDLQ(t, brokers, topic)
	t.Setenv("KAFKA_BROKERS", strings.Join(brokers, ","))
	t.Setenv("CAUSET_DLQ_TOPIC", topic)
	var out bytes.Buffer
	old := dlqOut
	dlqOut = &out
	t.Cleanup(func() { dlqOut = old })
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)

	require.NoError(t, (&dlqTailCmd{NoState: true}).Run(ctx, logger))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, out.String())
	require.Regexp(t, `^TIME\s+PROJECTION\s+EVENT TYPE\s+ENTITY\s+KIND\s+ATTEMPTS\s+STATE\s+OFFSET\s+ERROR$`, lines[0])
	require.Regexp(t, `^2026-12-02 12:00:00\s+artist_followers\s+ARTIST_FOLLOWED\s+user-0\s+sql\s+5\s+-\s+0:0\s+column "followed_at"`, lines[1])
	require.True(t, strings.HasSuffix(lines[1], "…"), "long errors are truncated")
	require.Contains(t, lines[3], "UNREADABLE: dlq record has schemaVersion 7")

	out.Reset()
	require.NoError(t, (&dlqTailCmd{NoState: true, JSON: true, dlqSelect: dlqSelect{ErrorKind: "ir_eval"}}).Run(ctx, logger))
	var line struct {
		Offset int64      `json:"offset"`
		Record dlq.Record `json:"record"`
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "the unreadable record carries no kind header, so it is shown")
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	require.EqualValues(t, 1, line.Offset)
	require.Equal(t, "ir_eval", line.Record.ErrorKind)

	// With Temporal: the STATE column.
	r, err := dlq.NewReader(ctx, dlq.ReaderOptions{Brokers: brokers, Topic: topic, Filter: dlq.Filter{ErrorKind: "sql"}})
	require.NoError(t, err)
	defer r.Close()
	out.Reset()
	n, err := runTail(ctx, r, missingTemporal{}, newTailPrinter(&out, false, false), logger)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Regexp(t, `\s5\s+not found\s+0:0\s`, out.String())

	out.Reset()
	require.NoError(t, (&dlqTailCmd{NoState: true, dlqSelect: dlqSelect{FromOffset: "3"}}).Run(ctx, logger))
	require.Contains(t, out.String(), "no dead letters on "+topic)
}

// missingTemporal knows no workflow and refuses to start one event's.
type missingTemporal struct{ refuse string }

func (missingTemporal) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewNotFound("not found")
}

func (missingTemporal) SignalWorkflow(context.Context, string, string, string, any) error {
	return errors.New("unexpected signal")
}

func (m missingTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	if strings.HasSuffix(o.ID, m.refuse) {
		return nil, errors.New("namespace rate limit")
	}
	return nil, nil
}

func TestKafkaDLQReplaySummary(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	publishTestDLQ(t, brokers, topic)
	ctx := context.Background()

	replay := func(tc dlq.Temporal, dry bool) (string, string, error) {
		r, err := dlq.NewReader(ctx, dlq.ReaderOptions{Brokers: brokers, Topic: topic})
		require.NoError(t, err)
		defer r.Close()
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: tc, TaskQueue: "tq", Retry: config.DefaultRetry(), DryRun: dry})
		require.NoError(t, err)
		var out, progress bytes.Buffer
		err = runReplay(ctx, r, rp, dry, &out, &progress)
		return out.String(), progress.String(), err
	}

	out, progress, err := replay(missingTemporal{}, true)
	require.Error(t, err, "the unreadable record fails")
	require.Contains(t, out, "would be restarted: "+contract.RetryWorkflowID("artist_followers", "production", "ev-0"))
	require.Contains(t, out, "failed: 0:2 -: record")
	require.Contains(t, out, "replay summary (dry run: nothing was signalled or started): signalled 0, restarted 2, already succeeded or in progress 0, failed 1")
	require.Contains(t, progress, "replay: read 3/3 records")

	out, _, err = replay(missingTemporal{refuse: ":ev-1"}, false)
	require.ErrorContains(t, err, "2 dead letter(s) failed to replay")
	require.Contains(t, out, "namespace rate limit")
	require.Contains(t, out, "signalled 0, restarted 1, already succeeded or in progress 0, failed 2")
}
