package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/internal/schema/schematest"
	"github.com/causet/projection-retry/internal/testenv"
)

// The database of the release before versioned migrations, with its data
// (internal/schema/schematest), is migrated as `causet migrate up` does and
// this build's pipeline runs on it: an event that release applied is a
// duplicate, its IR versions and intent handlers serve, the keys it left
// blocked — behind incidents with parked events, and behind a retry
// workflow killed mid-schedule — are released in order, and its dead
// letters replay.
func TestUpgradeFromTheReleaseBeforeMigrationsKafka(t *testing.T) {
	srv := testenv.Temporal(t)
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The fixture's workflow IDs are its own: on a server that ran this test
	// before (go test -count=2 shares one dev server) they exist already.
	for _, d := range schematest.DeadLetters[dlq.Record](t) {
		id, err := dlq.WorkflowID(d.Record)
		require.NoError(t, err)
		if _, err := srv.Client.DescribeWorkflow(ctx, id, ""); err == nil {
			t.Skipf("the fixture's workflow %s exists on this Temporal server already: run this test once per server (-count=1)", id)
		}
	}
	url := testenv.EmptyPostgresURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	schematest.LoadBeforeMigrations(t, pool)

	// The fixture's rows name the default topic; this test's broker may be
	// shared, so they move to a topic of the test's own, with the same three
	// partitions.
	topic, dlqTopic := testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, topic, 3)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	env := map[string]string{
		"DATABASE_URL":                       url,
		"KAFKA_BROKERS":                      strings.Join(brokers, ","),
		"CAUSET_EVENTS_TOPIC":                topic,
		"CAUSET_DLQ_TOPIC":                   dlqTopic,
		"CAUSET_CONSUMER_GROUP":              testenv.Topic(t, "group"),
		"CAUSET_TASK_QUEUE":                  testenv.TaskQueue(t),
		"CAUSET_METRICS_ADDR":                freeAddr(t),
		"PROJECTION_WORKER_MAX_RETRIES":      "2",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "1",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "1000",
		// The fixture's events occurred on the day it was made: a horizon of
		// ten years keeps them remembered whenever the test runs.
		"CAUSET_DEDUPE_HORIZON": "87600h",
	}

	_, err = app.Open(ctx, load(t, env), app.WithLogger(quiet()), app.WithTemporalAddress(srv.HostPort))
	require.ErrorContains(t, err, "causet migrate up", "a process refuses the unmigrated database")
	_, err = schema.Up(ctx, pool, nil)
	require.NoError(t, err)
	for _, table := range []string{"causet_blocked_keys", "causet_parked_events"} {
		_, err = pool.Exec(ctx, `UPDATE `+table+` SET topic = $1 WHERE topic = 'causet.events.v1'`, topic)
		require.NoError(t, err)
	}
	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	parked := count(`SELECT count(*)::int FROM causet_parked_events`)
	require.Positive(t, parked, "the incidents' parked events carried over")
	require.Equal(t, 1, count(`SELECT count(*)::int FROM causet_blocked_keys WHERE entity_id = 'fan-lane' AND head_workflow_id LIKE 'projection-retry:%'`),
		"the key blocked behind a retry workflow carried over")
	// The fix for the demo's missing column.
	_, err = pool.Exec(ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)

	svc, err := app.Open(ctx, load(t, env), app.WithLogger(quiet()), app.WithTemporalAddress(srv.HostPort))
	require.NoError(t, err)
	defer svc.Close()

	// The deployed IR versions and intent handlers serve.
	require.Contains(t, svc.Engine.Projections("TRACK_PLAYED"), "artist_stats")
	require.Contains(t, svc.Engine.Projections("ARTIST_FOLLOWED"), "artist_followers")
	cat, err := intents.NewCatalog(ctx, svc.Pool, quiet())
	require.NoError(t, err)
	for _, typ := range []string{"FollowArtist", "UnfollowArtist", "PlayTrack"} {
		_, err := cat.Lookup(ctx, typ)
		require.NoError(t, err, "intent handler %s", typ)
	}

	w, err := svc.NewWorker()
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()
	stopBridge, done := runBridge(t, ctx, svc)
	defer func() {
		stopBridge()
		require.NoError(t, <-done)
	}()

	// An event the release applied, sent again, is a duplicate; the
	// fan-lane entity's three follows, the first of them its key's head,
	// are on the topic still.
	var dupEnv, dupArtist string
	var dupPlays int
	require.NoError(t, pool.QueryRow(ctx, `SELECT e.envelope::text, s.artist_id, s.plays FROM causet_events e
JOIN artist_stats s ON s.artist_id = e.envelope->'payload'->>'artistId'
WHERE e.event_type = 'TRACK_PLAYED' AND EXISTS (SELECT 1 FROM causet_projection_applied a WHERE a.key = causet_applied_key('artist_stats', e.fork_id, e.event_id))
ORDER BY e.position LIMIT 1`).Scan(&dupEnv, &dupArtist, &dupPlays))
	ledger := count(`SELECT count(*)::int FROM causet_projection_applied`)
	rows, err := pool.Query(ctx, `SELECT envelope::text FROM causet_events WHERE entity_id = 'fan-lane' ORDER BY sequence`)
	require.NoError(t, err)
	lane, err := collectStrings(rows)
	require.NoError(t, err)
	require.Len(t, lane, 3)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer producer.Close()
	recs := []*kgo.Record{{Partition: 1, Key: []byte(keyOf(t, dupEnv)), Value: []byte(dupEnv)}}
	for _, v := range lane {
		recs = append(recs, &kgo.Record{Partition: 0, Key: []byte("fan-lane"), Value: []byte(v)})
	}
	require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())

	require.Eventually(t, func() bool {
		return count(`SELECT count(*)::int FROM causet_blocked_keys`) == 0 && count(`SELECT count(*)::int FROM causet_parked_events`) == 0 &&
			testenv.SumMetric(t, svc.Registry, "causet_bridge_applied_total", map[string]string{"result": "duplicate"}) >= 1
	}, 3*time.Minute, 200*time.Millisecond, "blocked keys %d, parked events %d, duplicates %v",
		count(`SELECT count(*)::int FROM causet_blocked_keys`), count(`SELECT count(*)::int FROM causet_parked_events`),
		testenv.SumMetric(t, svc.Registry, "causet_bridge_applied_total", map[string]string{"result": "duplicate"}))
	released := testenv.SumMetric(t, svc.Registry, "causet_bridge_parked_events_total", map[string]string{"result": "released"}) +
		testenv.SumMetric(t, svc.Registry, "causet_bridge_parked_events_total", map[string]string{"result": "head"})
	require.EqualValues(t, parked, released, "every parked event left the table once")
	require.Equal(t, dupPlays, count(`SELECT plays::int FROM artist_stats WHERE artist_id = $1`, dupArtist),
		"the event the release applied is not applied again")
	require.Equal(t, []string{"artist-1", "artist-2", "artist-3"}, follows(t, pool, "fan-lane"),
		"the key blocked behind its head: the head applied on redelivery, its later events after it, in order")
	require.Greater(t, count(`SELECT count(*)::int FROM causet_projection_applied`), ledger)

	// The release's dead letters replay: their runs are gone from this
	// Temporal, so each is started again, and the follow applies now that
	// its column exists.
	r, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: svc.Temporal.Client, TaskQueue: env["CAUSET_TASK_QUEUE"], Reason: "upgrade test",
		DedupeHorizon: 87600 * time.Hour}) // the test's horizon, as causet dlq replay reads it from CAUSET_DEDUPE_HORIZON
	require.NoError(t, err)
	var follow *schematest.DeadLetter[dlq.Record]
	for i, d := range schematest.DeadLetters[dlq.Record](t) {
		res, err := r.Replay(ctx, dlq.Item{Record: d.Record, Key: []byte(d.Key), Partition: d.Partition, Offset: d.Offset})
		require.NoError(t, err)
		require.Equal(t, dlq.Restarted, res.Outcome, "dead letter %d: %v", i, res.Err)
		if d.Record.ProjectionName == "artist_followers" {
			follow = &schematest.DeadLetters[dlq.Record](t)[i]
		}
	}
	require.NotNil(t, follow, "the fixture has a dead-lettered follow")
	var ev event.Envelope
	require.NoError(t, json.Unmarshal(*follow.Record.Event, &ev))
	id := contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
	require.NoError(t, svc.Temporal.Client.GetWorkflow(ctx, id, "").Get(ctx, nil), "the replayed follow's run succeeds")
	var artist struct {
		ArtistID string `json:"artistId"`
	}
	require.NoError(t, json.Unmarshal(ev.Payload, &artist))
	require.Contains(t, follows(t, pool, ev.EntityID), artist.ArtistID)
}

func collectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func keyOf(t *testing.T, envelope string) string {
	t.Helper()
	var ev event.Envelope
	require.NoError(t, json.Unmarshal([]byte(envelope), &ev))
	return ev.EntityID
}

// follows lists the artists user follows in artist_followers.
func follows(t *testing.T, pool *pgxpool.Pool, user string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT artist_id FROM artist_followers WHERE user_id = $1 ORDER BY artist_id`, user)
	require.NoError(t, err)
	out, err := collectStrings(rows)
	require.NoError(t, err)
	return out
}
