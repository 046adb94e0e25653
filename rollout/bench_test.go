package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

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
