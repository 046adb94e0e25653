package app_test

// Helpers shared by the app's tests.

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// load is the configuration of env alone.
func load(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// consumerEnv creates an events and a DLQ topic of the test's own on
// brokers and returns the environment of a service that consumes them, on
// the test's database, consumer group and task queue, with more on top.
func consumerEnv(t *testing.T, brokers []string, more map[string]string) (env map[string]string, topic, dlqTopic string) {
	t.Helper()
	topic, dlqTopic = testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	env = map[string]string{
		"DATABASE_URL":          testenv.PostgresURL(t),
		"KAFKA_BROKERS":         brokers[0],
		"CAUSET_EVENTS_TOPIC":   topic,
		"CAUSET_DLQ_TOPIC":      dlqTopic,
		"CAUSET_CONSUMER_GROUP": testenv.Topic(t, "group"),
		"CAUSET_TASK_QUEUE":     testenv.TaskQueue(t),
	}
	maps.Copy(env, more)
	return env, topic, dlqTopic
}

// withFollowers is a setup that runs ddl and deploys testenv.FollowersIR.
func withFollowers(ddl string) app.Option {
	return app.WithSetup(func(ctx context.Context, pool *pgxpool.Pool) error {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return err
		}
		doc, err := projection.Parse([]byte(testenv.FollowersIR))
		if err != nil {
			return err
		}
		_, err = projection.Deploy(ctx, pool, doc)
		return err
	})
}

// runBridge runs svc's bridge until stop is called; done then yields what
// Run returned.
func runBridge(t *testing.T, ctx context.Context, svc *app.Service) (stop context.CancelFunc, done <-chan error) {
	t.Helper()
	b, err := svc.NewBridge()
	require.NoError(t, err)
	bctx, stop := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { ch <- b.Run(bctx) }()
	return stop, ch
}
