package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/worker"
)

// A retry run whose attempts are due while the database behind a pooler or
// proxy stops answering — its open connections silent for good, new ones
// accepted and silent until it answers again 40 s later — counts none of
// the attempts that meet it: the run waits for the database and applies
// the event once it answers, nothing dead-lettered. Attempt 2 fails for a
// reason of the event's own (a missing column, added before the hang).
func TestRetryRunWaitsOutAHungDatabase(t *testing.T) {
	const hangFor = 40 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	direct, srv, brokers := testenv.Postgres(t), testenv.Temporal(t), testenv.Kafka(t)
	dlqTopic, tq := testenv.Topic(t, "dlq"), testenv.TaskQueue(t)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	_, err := direct.Exec(ctx, testenv.FollowersNoFollowedAtDDL)
	require.NoError(t, err)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	deploy(t, ctx, direct, testenv.FollowersIR)

	// The worker's database is behind the peer, as it would be behind a pooler.
	pool, peer := testenv.PoolBehindHungPeer(t, ctx, direct, app.PoolPingTimeout)
	engine, err := projection.NewEngine(ctx, pool, logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	w, err := worker.New(worker.Options{
		Client: srv.Client, TaskQueue: tq,
		Activities: &activities.Activities{Applier: engine, Logger: logger, ProbeDatabase: app.ProbePostgres(pool),
			Publisher: &dlq.Publisher{Client: producer, Topic: dlqTopic, ConsumerGroup: testConsumerGroup}},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ev := event.Envelope{EventID: "hung-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-7", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-3"}`)}
	id := contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
	in := contract.RetryInput{Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeInline,
		Source:       contract.Source{Topic: "causet.events.v1", Partition: 0, Offset: 1, Timestamp: time.Now().UTC()},
		FirstAttempt: &contract.Attempt{Number: 1, StartedAt: time.Now(), ErrorKind: "sql", Error: `column "followed_at" does not exist`, IRVersion: 1},
		Retry:        config.DefaultRetry(), ReplayWindow: time.Hour}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq,
		TypedSearchAttributes: temporalAttrs(ev, "artist_followers")}, contract.RetryWorkflowName, in)
	require.NoError(t, err)

	// Attempt 2 fails on the missing column; the column is added, and the
	// database hangs before attempt 3 (due 4 s after attempt 2).
	require.Eventually(t, func() bool { return len(logs.Where(t, "event", "projection_retry")) == 1 }, 30*time.Second, 20*time.Millisecond,
		"attempt 2 failed")
	_, err = direct.Exec(ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	peer.Hang()
	time.Sleep(hangFor)
	require.Len(t, logs.Where(t, "event", "projection_retry"), 1, "no attempt counted through the hang")
	require.Empty(t, logs.Where(t, "event", "projection_dead_lettered"))
	peer.Answer()
	answered := time.Now()

	var final contract.Status
	require.NoError(t, run.Get(ctx, &final))
	require.Equal(t, contract.StateSucceeded, final.State)
	t.Logf("applied %s after the database answered new connections", time.Since(answered).Round(100*time.Millisecond))
	require.Less(t, time.Since(answered), 45*time.Second, "applied within the outage wait's 30 s backoff of the database answering")
	require.Equal(t, []int{1, 2, 3}, []int{final.Attempts[0].Number, final.Attempts[1].Number, final.Attempts[2].Number})
	require.Len(t, final.Attempts, 3)
	var n int
	require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-7'`).Scan(&n))
	require.Equal(t, 1, n, "applied once")
	require.NotEmpty(t, logs.Where(t, "event", "projection_database_outage"), "the attempt that met the hang was an outage")
	require.Empty(t, logs.Where(t, "event", "projection_dead_lettered"))
}
