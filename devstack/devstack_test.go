package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/proc"
	"github.com/causet/projection-retry/internal/proc/proctest"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/projection"
)

func needTools(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, errPG := proc.PostgresBinDir(ctx) // system binaries, or fetched ones
	_, errT := FindTemporalCLI()
	if err := errors.Join(errPG, errT); err != nil {
		if inCI, _ := strconv.ParseBool(os.Getenv("CI")); inCI {
			t.Fatalf("devstack: %v", err)
		}
		t.Skipf("devstack: %v", err)
	}
}

func TestStackStartStop(t *testing.T) {
	needTools(t)
	root := proctest.TempRoot(t, "causet-devstack-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	s, err := Start(ctx, Options{
		Getenv: func(string) string { return "" }, // start everything
		Topics: []string{"causet.events.v1", "causet.projection-dlq.v1"},
	})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	require.NotNil(t, s.Postgres)
	require.NotNil(t, s.Temporal)
	require.NotNil(t, s.Kafka)
	require.True(t, strings.HasPrefix(s.Postgres.Dir, root))
	require.True(t, strings.HasPrefix(s.Temporal.Dir, root))

	// PostgreSQL answers, and the examples set up (demo schema).
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	_, err = schema.Up(ctx, pool, nil)
	require.NoError(t, err)
	deployed, err := SetupExamples(ctx, pool, true)
	require.NoError(t, err)
	require.Len(t, deployed, 2)
	again, err := SetupExamples(ctx, pool, true)
	require.NoError(t, err)
	for _, d := range again {
		require.False(t, d.New, "same document deployed twice: %+v", d)
	}
	var hasFollowedAt bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'artist_followers' AND column_name = 'followed_at')`).Scan(&hasFollowedAt))
	require.False(t, hasFollowedAt, "demo artist_followers must lack followed_at")
	deps, err := projection.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, deps, 2)

	// The example intent handlers, PlayTrack without DemoDroppedRule in
	// demo mode; the full examples replace them as new versions.
	handlers, err := SetupExampleIntents(ctx, pool, true)
	require.NoError(t, err)
	require.Equal(t, []Deployed{
		{Name: "FollowArtist", Version: 1, New: true},
		{Name: "PlayTrack", Version: 1, New: true, Note: "demo: without its days_positive rule"},
		{Name: "UnfollowArtist", Version: 1, New: true},
	}, handlers)
	handlers, err = SetupExampleIntents(ctx, pool, true)
	require.NoError(t, err)
	for _, d := range handlers {
		require.False(t, d.New, "same document deployed twice: %+v", d)
	}
	ruleNames := func() []string {
		ds, err := intents.List(ctx, pool)
		require.NoError(t, err)
		for _, d := range ds {
			if d.IntentType == "PlayTrack" {
				var names []string
				for _, r := range d.Document.Rules {
					names = append(names, r.Name)
				}
				return names
			}
		}
		return nil
	}
	require.Equal(t, []string{"track_required", "plays_positive"}, ruleNames())
	handlers, err = SetupExampleIntents(ctx, pool, false)
	require.NoError(t, err)
	require.Equal(t, Deployed{Name: "PlayTrack", Version: 2, New: true}, handlers[1])
	require.False(t, handlers[0].New)
	require.Equal(t, []string{"track_required", "plays_positive", "days_positive"}, ruleNames())
	pool.Close()
	b, err := os.ReadFile(filepath.Join(s.Postgres.Dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pgPID, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)

	// Temporal answers with the UI address set.
	c, err := client.DialContext(ctx, client.Options{HostPort: s.TemporalAddress, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	require.NoError(t, err)
	c.Close()
	require.NotEmpty(t, s.TemporalUI)

	// Kafka has both topics with 3 partitions.
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaBrokers...))
	require.NoError(t, err)
	td, err := kadm.NewClient(cl).ListTopics(ctx, "causet.events.v1", "causet.projection-dlq.v1")
	require.NoError(t, err)
	for _, name := range []string{"causet.events.v1", "causet.projection-dlq.v1"} {
		require.Len(t, td[name].Partitions, 3, name)
	}
	cl.Close()

	tPID := s.Temporal.PID
	require.True(t, proctest.Alive(pgPID))
	require.True(t, proctest.Alive(tPID))
	require.NoError(t, s.Stop())
	stopped = true
	require.NoError(t, s.Stop(), "Stop is idempotent")

	require.Eventually(t, func() bool { return !proctest.Alive(pgPID) && !proctest.Alive(tPID) }, 10*time.Second, 100*time.Millisecond,
		"postgres %d or temporal %d still running", pgPID, tPID)
	require.Empty(t, proctest.Mentioning(root), "processes still reference %s", root)
	left, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, left, "temp dirs left behind")
}

func TestStartUsesEnvironment(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":     "postgres://u@db.invalid:5432/x",
		"TEMPORAL_ADDRESS": "temporal.invalid:7233",
		"KAFKA_BROKERS":    "k1.invalid:9092, k2.invalid:9092",
	}
	// No topics: nothing is contacted, nothing is started.
	s, err := Start(context.Background(), Options{Getenv: func(k string) string { return env[k] }})
	require.NoError(t, err)
	require.Nil(t, s.Postgres)
	require.Nil(t, s.Temporal)
	require.Nil(t, s.Kafka)
	require.Equal(t, env["DATABASE_URL"], s.DatabaseURL)
	require.Equal(t, []string{"k1.invalid:9092", "k2.invalid:9092"}, s.KafkaBrokers)
	require.NoError(t, s.Stop())
}

func TestNoTemporalCLIIsOneLine(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err := Start(context.Background(), Options{Getenv: func(k string) string {
		if k == "DATABASE_URL" {
			return "postgres://u@db.invalid/x"
		}
		return ""
	}})
	// The test binary's directory may hold a temporal binary only by accident.
	if err == nil {
		t.Skip("a temporal CLI was found next to the test binary")
	}
	require.ErrorIs(t, err, ErrNoTemporalCLI)
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, err.Error(), "make tools")
}

func TestDemoIntents(t *testing.T) {
	counts := map[string]int{}
	ids := map[string]bool{}
	for i := range 100 {
		in := DemoIntent("r1", i)
		require.False(t, ids[in.IntentID], "duplicate intent ID %s", in.IntentID)
		ids[in.IntentID] = true
		require.Equal(t, "production", in.ForkID)
		require.NotEmpty(t, in.EntityID)
		// The envelope of its event is valid: its ID is <intentId>:1.
		raw, err := json.Marshal(in.Payload)
		require.NoError(t, err)
		_, err = event.Decode([]byte(`{"eventId":"` + in.IntentID + `:1","eventType":"E","entityId":"` + in.EntityID +
			`","forkId":"production","intentId":"` + in.IntentID + `","sequence":1,"payload":` + string(raw) + `}`))
		require.NoError(t, err, "demo intent %d", i)
		p := in.Payload.(map[string]any)
		switch {
		case in.IntentType == "FollowArtist":
			counts["follow"]++
		case in.IntentType == "PlayTrack" && p["days"] == 0:
			counts["days0"]++
		case in.IntentType == "PlayTrack":
			require.GreaterOrEqual(t, p["days"], 1)
			require.GreaterOrEqual(t, p["plays"], 1)
			counts["play"]++
		case in.IntentType == "UnfollowArtist":
			counts["unfollow"]++
		}
	}
	require.Equal(t, map[string]int{"follow": 10, "days0": 10, "play": 70, "unfollow": 10}, counts)
	require.NotEqual(t, DemoIntent("r1", 0).IntentID, DemoIntent("r2", 0).IntentID)
}
