package testenv_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestPostgresSelect1(t *testing.T) {
	pool := testenv.Postgres(t)
	var one int
	require.NoError(t, pool.QueryRow(ctx(t), "select 1").Scan(&one))
	require.Equal(t, 1, one)
}

func TestPostgresIsolation(t *testing.T) {
	a, b := testenv.Postgres(t), testenv.Postgres(t)
	var dbA, dbB string
	require.NoError(t, a.QueryRow(ctx(t), "select current_database()").Scan(&dbA))
	require.NoError(t, b.QueryRow(ctx(t), "select current_database()").Scan(&dbB))
	require.NotEqual(t, dbA, dbB)

	_, err := a.Exec(ctx(t), "create table only_in_a (id int primary key)")
	require.NoError(t, err)
	_, err = b.Exec(ctx(t), "select * from only_in_a")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42P01", pgErr.Code) // undefined_table
	// Same name in b is free.
	_, err = b.Exec(ctx(t), "create table only_in_a (id int primary key)")
	require.NoError(t, err)
}

func TestPostgresURL(t *testing.T) {
	u := testenv.PostgresURL(t)
	require.Contains(t, u, "postgres")
	pool := testenv.Postgres(t)
	require.NotEqual(t, u, pool.Config().ConnString(), "each call gets its own database")
}

func TestPostgresStopStart(t *testing.T) {
	pool := testenv.Postgres(t)
	var one int
	require.NoError(t, pool.QueryRow(ctx(t), "select 1").Scan(&one))

	testenv.StopPostgres(t)
	qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := pool.QueryRow(qctx, "select 1").Scan(&one)
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.False(t, errors.As(err, &pgErr), "an outage is a connection error, not a server error: %v", err)
	t.Logf("while stopped: %v", err)

	testenv.StartPostgres(t)
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx(t), "select 1").Scan(&one) == nil
	}, 15*time.Second, 100*time.Millisecond, "pool recovers after restart")
	// The test's database survived the restart.
	require.NoError(t, pool.QueryRow(ctx(t), "select 1").Scan(&one))
}

func TestTemporalHealth(t *testing.T) {
	srv := testenv.Temporal(t)
	require.NotEmpty(t, srv.HostPort)
	require.Equal(t, "default", srv.Namespace)
	_, err := srv.Client.CheckHealth(ctx(t), nil)
	require.NoError(t, err)

	out, err := srv.CLI("operator", "search-attribute", "list")
	require.NoError(t, err)
	for _, sa := range testenv.SearchAttributes {
		require.Contains(t, out, sa)
	}
	_, err = srv.CLI("workflow", "list", "--query", `CausetRetryState="dead_lettered" AND CausetProjection="x"`)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(testenv.TaskQueue(t), "tq-"))
}

func TestKafkaProduceConsume(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "testenv")
	testenv.CreateTopic(t, brokers, topic, 3)

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer prod.Close()
	const n = 20
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte{byte('a' + i%5)}, Value: []byte{byte(i)}})
	}
	require.NoError(t, prod.ProduceSync(ctx(t), recs...).FirstErr())

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	seen := map[byte]bool{}
	c := ctx(t)
	for len(seen) < n {
		fs := cons.PollFetches(c)
		require.NoError(t, c.Err(), "timed out after %d of %d records", len(seen), n)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[r.Value[0]] = true })
	}
}

func TestKafkaClusterControl(t *testing.T) {
	if testenv.IsRealKafka() {
		t.Skip("fault injection needs kfake")
	}
	cluster := testenv.KafkaCluster(t)
	var failed atomic.Int32
	// Fail the first produce with a retriable error; the client retries.
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = 6 // NOT_LEADER_FOR_PARTITION, retriable
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		failed.Add(1)
		return resp, nil, true
	})
	brokers := cluster.ListenAddrs()
	topic := testenv.Topic(t, "testenv")
	testenv.CreateTopic(t, brokers, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.MetadataMinAge(50*time.Millisecond)) // refresh fast after NOT_LEADER
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte("x")}).FirstErr())
	require.Equal(t, int32(1), failed.Load())
}

func TestUniqueNames(t *testing.T) {
	a, b := testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.events.v1")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "causet.events.v1."))
	long := strings.Repeat("x", 300)
	require.LessOrEqual(t, len(testenv.Topic(t, long[:100])), 249)
}

// Last: restarting the in-memory dev server wipes its state.
func TestTemporalStopStart(t *testing.T) {
	srv := testenv.Temporal(t)
	testenv.StopTemporal(t)
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := srv.Client.CheckHealth(c, nil)
	require.Error(t, err)
	testenv.StartTemporal(t)
	require.Eventually(t, func() bool {
		_, err := srv.Client.CheckHealth(ctx(t), nil)
		return err == nil
	}, 30*time.Second, 200*time.Millisecond)
}
