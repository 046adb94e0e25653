package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/relay"
)

// The test binary runs as a relay process, for the kill test, when these are set.
const (
	childDatabaseURL = "RELAY_TEST_CHILD_DATABASE_URL"
	childBrokers     = "RELAY_TEST_CHILD_BROKERS"
	childTopic       = "RELAY_TEST_CHILD_TOPIC"
)

func childMode() bool { return os.Getenv(childDatabaseURL) != "" }

// runChild runs a relay until the process is killed.
func runChild() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childDatabaseURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	r, err := relay.New(relay.Options{
		Pool: pool, Brokers: strings.Split(os.Getenv(childBrokers), ","), Topic: os.Getenv(childTopic),
		Batch: 5, PollInterval: 5 * time.Millisecond, LockRetry: 20 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	_ = r.Run(ctx)
	os.Exit(0)
}

// startWriters runs k goroutines writing intents of 1 to 3 events to 8
// entities of 2 forks (so writers contend for entities) until the
// returned stop, which requires that every write succeeded.
func startWriters(t *testing.T, l *ledger, k int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range k {
		wg.Go(func() {
			for ctx.Err() == nil {
				// Not ctx: a commit cut short by it may still have
				// committed, unrecorded.
				wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := l.write(wctx, []string{"main", "f2"}[rand.IntN(2)], fmt.Sprintf("e-%d", rand.IntN(8)), 1+rand.IntN(3))
				wcancel()
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond)
			}
		})
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		wg.Wait()
		require.NoError(t, first, "a ledger write failed")
	}
	t.Cleanup(stop)
	return stop
}

// cancelAfter cancels a relay's context once Kafka has acknowledged at
// records: in the middle of a batch, with records in flight.
type cancelAfter struct {
	at     int64
	n      atomic.Int64
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (h *cancelAfter) OnProduceRecordUnbuffered(_ *kgo.Record, err error) {
	if err == nil && h.n.Add(1) == h.at {
		h.cancel()
		h.fired.Store(true)
	}
}

// eventIDs are the distinct eventIds of recs, sorted.
func eventIDs(t testing.TB, recs []*kgo.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		env, err := event.Decode(r.Value)
		require.NoError(t, err)
		out = append(out, env.EventID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// A relay whose context ends at a random point of a batch, 10 times, while
// intents keep being written: each time it has marked exactly what Kafka
// acknowledged, and in the end every event is on the topic once, in order.
func TestRelayKafkaCanceledMidBatch(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)
	l.writeMany(t, 30, 8)
	stopWriters := startWriters(t, l, 3)

	for i := range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		opts := fastOptions(t, l, brokers, topic)
		opts.Batch = 5 + rand.IntN(20)
		hook := &cancelAfter{at: 1 + rand.Int64N(int64(3*opts.Batch)), cancel: cancel}
		opts.KafkaOptions = []kgo.Opt{kgo.WithHooks(hook)}
		rr := startWith(t, ctx, opts)
		if i%2 == 0 {
			// After a random number of acknowledgements: records in flight.
			require.Eventually(t, hook.fired.Load, 30*time.Second, time.Millisecond)
		} else {
			// Anywhere: reading, producing or marking.
			require.Eventually(t, func() bool { return hook.n.Load() > 0 }, 30*time.Second, time.Millisecond)
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		}
		rr.stop(t)
		published := l.publishedIDs(t)
		slices.Sort(published)
		require.Equal(t, published, eventIDs(t, topicRecords(t, brokers, topic)),
			"iteration %d: marked exactly what Kafka acknowledged", i)
	}

	stopWriters()
	start(t, fastOptions(t, l, brokers, topic))
	l.waitAllPublished(t, 60*time.Second)
	events := l.events()
	resends := checkTopic(t, topicRecords(t, brokers, topic), events)
	require.Zero(t, resends, "a relay that was only canceled re-sends nothing")
	t.Logf("%d events", len(events))
}

// A relay process SIGKILLed at a random point, 10 times, while intents keep
// being written: rows Kafka acknowledged but the relay did not mark are
// sent again, and only those; in the end every event is on the topic, each
// entity's events first appear in sequence order.
func TestRelayKafkaKilledMidBatch(t *testing.T) {
	l := newLedger(t)
	brokers, topic := eventsTopic(t)
	l.writeMany(t, 30, 8)
	stopWriters := startWriters(t, l, 3)

	published := func() int { return len(l.publishedIDs(t)) }
	for i := range 10 {
		before := published()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			childDatabaseURL+"="+l.pool.Config().ConnString(),
			childBrokers+"="+strings.Join(brokers, ","),
			childTopic+"="+topic)
		cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		require.Eventually(t, func() bool { return published() > before }, 30*time.Second, 2*time.Millisecond,
			"iteration %d: the relay process publishes", i)
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		require.Error(t, cmd.Wait(), "killed")
	}

	stopWriters()
	start(t, fastOptions(t, l, brokers, topic))
	l.waitAllPublished(t, 60*time.Second)
	events := l.events()
	resends := checkTopic(t, topicRecords(t, brokers, topic), events)
	t.Logf("%d events, %d re-sent after the kills", len(events), resends)
}
