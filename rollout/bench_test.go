package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/rollout"
)

// benchDeadLetters is the figure: a check on 10,000 dead letters.
const benchDeadLetters = 10_000

// BenchmarkCheckDeadLetters times `causet projections check` on 10,000
// dead letters of artist_followers (every follow failed on the missing
// followed_at column), read from the DLQ topic: listing the projection's
// runs in Temporal, reading the topic, and trying each event in
// transactions that roll back. The users also carry a follow that applied
// before, so the rows the fix would write sit among existing rows.
//
// The dead letters' runs are not in Temporal (as after their replay
// window): the check takes their events from the records, never from a
// run's history. TestCheckReadsRunsWithoutRecords takes that path, one
// history read per run, bounded by Limit and read 16 at a time.
//
//	go test ./rollout -run '^$' -bench CheckDeadLetters -benchtime 3x
func BenchmarkCheckDeadLetters(b *testing.B) {
	s := newStack(b, nil)
	ctx := s.ctx
	fixed := candidate(b, true)
	runner, err := s.svc.RolloutRunner()
	require.NoError(b, err)
	// Each user follows another artist already: the fix's rows go among
	// existing ones.
	_, err = s.svc.Pool.Exec(ctx, `INSERT INTO artist_followers (user_id, artist_id) SELECT 'user-' || lpad(g::text, 5, '0'), 'artist-b' FROM generate_series(0, $1 - 1) g`, benchDeadLetters)
	require.NoError(b, err)
	produceDeadLetters(b, ctx, runner.Sources.DLQ, s.prefix, benchDeadLetters)

	for _, tc := range []struct {
		name    string
		doc     *projection.Document
		outcome rollout.Outcome
	}{
		{"fix", fixed, rollout.WouldApply},
		{"same-error", candidate(b, false), rollout.StillFails},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var rep rollout.Report
			for b.Loop() {
				failing, g, err := rollout.Gather(ctx, runner.Sources, "artist_followers", benchDeadLetters)
				require.NoError(b, err)
				rep, err = rollout.Check(ctx, s.svc.Engine, tc.doc, failing, g)
				require.NoError(b, err)
			}
			require.Equal(b, benchDeadLetters, rep.Checked)
			require.Equal(b, benchDeadLetters, rep.Totals[tc.outcome], "%s", rep.Text(3))
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/1000, "s/check")
			require.Equal(b, benchDeadLetters, s.count(b, `SELECT count(*) FROM artist_followers`), "nothing written")
			require.Zero(b, s.count(b, `SELECT count(*) FROM causet_projection_applied`), "no ledger row")
		})
	}
}

func follow(id, user, artist string) event.Envelope {
	return event.Envelope{EventID: id, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production", Sequence: 1,
		OccurredAt: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC), Payload: json.RawMessage(fmt.Sprintf(`{"artistId":%q}`, artist))}
}

// produceDeadLetters writes n DLQ records of failed follows (artist-a) of
// users 0..n-1, as PublishDeadLetter does.
func produceDeadLetters(tb testing.TB, ctx context.Context, o *dlq.ReaderOptions, prefix string, n int) {
	tb.Helper()
	cl, err := kgo.NewClient(append(o.ClientOpts, kgo.SeedBrokers(o.Brokers...))...)
	require.NoError(tb, err)
	defer cl.Close()
	now := time.Now().UTC()
	var recs []*kgo.Record
	for i := range n {
		ev := follow(fmt.Sprintf("%s-dl-%05d", prefix, i), fmt.Sprintf("user-%05d", i), "artist-a")
		raw, err := json.Marshal(ev)
		require.NoError(tb, err)
		msg := json.RawMessage(raw)
		rec := dlq.Record{Event: &msg, ProjectionName: "artist_followers", IRVersion: 1, EventType: ev.EventType, EntityID: ev.EntityID,
			ForkID: ev.ForkID, Error: `column "followed_at" of relation "artist_followers" does not exist`, ErrorKind: "sql",
			RetryCount: 5, FirstFailedAt: now, DeadLetteredAt: now}
		kr, err := rec.KafkaRecord(o.Topic, []byte(ev.EntityID))
		require.NoError(tb, err)
		recs = append(recs, kr)
		if len(recs) == 1000 || i == n-1 {
			require.NoError(tb, cl.ProduceSync(ctx, recs...).FirstErr())
			recs = recs[:0]
		}
	}
}

// BenchmarkRolloutDeadLetters runs `causet projections rollout` of the fix
// over CAUSET_BENCH_ROLLOUT_N dead letters (default 100,000, the most
// --limit takes) at CAUSET_BENCH_ROLLOUT_RATE replays a second (default
// 1,000, the most --rate takes), on the Temporal dev server's default
// limits: the check, the deploy, every replay (each a new retry run, their
// runs being gone: the expensive path) and the wait until every event has
// applied. It reports the time, the rollout's runs (it continues as new)
// and the history length of its longest run, which must stay under the
// server's 51,200-event limit.
//
//	go test ./rollout -run '^$' -bench RolloutDeadLetters -benchtime 1x -timeout 2h
func BenchmarkRolloutDeadLetters(b *testing.B) {
	n := envInt(b, "CAUSET_BENCH_ROLLOUT_N", contract.MaxRolloutLimit)
	rate := envInt(b, "CAUSET_BENCH_ROLLOUT_RATE", 1000)
	stackTimeout = 2 * time.Hour
	for b.Loop() {
		s := newStack(b, nil)
		runner, err := s.svc.RolloutRunner()
		require.NoError(b, err)
		produceDeadLetters(b, s.ctx, runner.Sources.DLQ, s.prefix, n)
		doc := candidate(b, true)
		body, err := json.Marshal(doc)
		require.NoError(b, err)
		in := contract.RolloutInput{Projection: doc.Name, Document: body, Version: 2, MaxFailing: 0.1, Rate: float64(rate), Limit: n, Identity: "bench"}
		id := contract.RolloutWorkflowID(doc.Name, 2, body)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		start := time.Now()
		run, err := s.svc.Temporal.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.svc.Config.TaskQueue},
			contract.RolloutWorkflowName, in)
		require.NoError(b, err)
		var p contract.RolloutProgress
		require.NoError(b, run.Get(ctx, &p))
		took := time.Since(start)
		require.Equal(b, contract.RolloutDone, p.State, p.Reason)
		require.Equal(b, n, p.Replayed)
		require.Equal(b, n, p.Applied)
		var applied int
		require.NoError(b, s.svc.Pool.QueryRow(ctx, `SELECT count(*) FROM causet_projection_applied`).Scan(&applied))
		require.Equal(b, n, applied, "each once")

		runs, longest, total := 0, 0, 0
		var token []byte
		for {
			resp, err := s.svc.Temporal.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: s.temporal.Namespace, Query: fmt.Sprintf("WorkflowId = '%s'", id), NextPageToken: token})
			require.NoError(b, err)
			for _, e := range resp.GetExecutions() {
				runs++
				l := int(e.GetHistoryLength())
				longest, total = max(longest, l), total+l
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		cancel()
		require.Less(b, longest, 51_200)
		b.ReportMetric(took.Seconds(), "s/rollout")
		b.ReportMetric(float64(n)/took.Seconds(), "replays/s")
		b.ReportMetric(float64(runs), "runs")
		b.ReportMetric(float64(longest), "events/longest-run")
		b.ReportMetric(float64(total), "events/total")
	}
}

func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(tb, err, name)
	return n
}
