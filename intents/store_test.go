package intents_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/testenv"
)

func dbSetup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, testenv.Postgres(t)
}

func deployYAML(t *testing.T, ctx context.Context, pool *pgxpool.Pool, doc string, opts ...intents.Option) int {
	t.Helper()
	d, err := intents.Parse([]byte(doc), opts...)
	require.NoError(t, err)
	v, err := intents.Deploy(ctx, pool, d, opts...)
	require.NoError(t, err)
	return v
}

func TestDeployVersionsAndCatalog(t *testing.T) {
	ctx, pool := dbSetup(t)
	deps, err := intents.List(ctx, pool)
	require.NoError(t, err, "List before the schema exists")
	require.Empty(t, deps)

	cat, err := intents.NewCatalog(ctx, pool, nil)
	require.NoError(t, err)
	_, err = cat.Lookup(ctx, "Ping")
	require.ErrorIs(t, err, intents.ErrUnknownIntentType)
	require.EqualError(t, err, `unknown intentType "Ping": no intent handler is deployed for it`)

	v1 := "intent_type: Ping\nemits: [{event_type: PINGED, payload: {v: 1}}]\n"
	require.Equal(t, 1, deployYAML(t, ctx, pool, v1))
	time.Sleep(intents.MissRefreshInterval) // a miss reloads at most once a second
	h, err := cat.Lookup(ctx, "Ping")
	require.NoError(t, err, "a miss reloads the catalog")
	require.Equal(t, 1, h.Version())

	require.Equal(t, 2, deployYAML(t, ctx, pool, strings.Replace(v1, "v: 1", "v: 2", 1)))
	in := intents.Intent{IntentID: "i", IntentType: "Ping", EntityID: "e", ForkID: "f", Payload: map[string]any{}}
	d, err := cat.Decide(ctx, in, intents.NewReader(pool))
	require.NoError(t, err)
	require.Equal(t, 1, d.HandlerVersion, "the cache is used until refreshed")
	require.NoError(t, cat.Refresh(ctx))
	d, err = cat.Decide(ctx, in, intents.NewReader(pool))
	require.NoError(t, err)
	require.Equal(t, 2, d.HandlerVersion, "the newest version wins")
	require.JSONEq(t, `{"v":2}`, string(d.Events[0].Payload))

	deps, err = intents.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, deps, 1)
	require.Equal(t, "Ping", deps[0].IntentType)
	require.Equal(t, 2, deps[0].Version)

	_, err = intents.Deploy(ctx, pool, &intents.Document{IntentType: "Bad"})
	var ve *intents.ValidationError
	require.ErrorAs(t, err, &ve, "an invalid document is never stored")
}

// A watching catalog takes a deploy at its notification, long before its
// periodic refresh.
func TestWatchingCatalogRefreshesOnDeployNotification(t *testing.T) {
	ctx, pool := dbSetup(t)
	cat, err := intents.NewCatalog(ctx, pool, nil)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cat.Watch(wctx, time.Hour) }()
	defer func() { stop(); <-done }()

	v1 := "intent_type: Ping\nemits: [{event_type: PINGED, payload: {v: 1}}]\n"
	require.Equal(t, 1, deployYAML(t, ctx, pool, v1))
	// IntentTypes reads the cache only: nothing but the watch can fill it.
	require.Eventually(t, func() bool { return slices.Contains(cat.IntentTypes(), "Ping") }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, deployYAML(t, ctx, pool, strings.Replace(v1, "v: 1", "v: 2", 1)))
	in := intents.Intent{IntentID: "i", IntentType: "Ping", EntityID: "e", ForkID: "f", Payload: map[string]any{}}
	require.Eventually(t, func() bool {
		d, err := cat.Decide(ctx, in, intents.NewReader(pool))
		return err == nil && d.HandlerVersion == 2
	}, 10*time.Second, 20*time.Millisecond)
}

func TestConcurrentDeploysGetDistinctVersions(t *testing.T) {
	ctx, pool := dbSetup(t)
	const n = 8
	versions := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := intents.Parse([]byte("intent_type: Ping\nemits: [{event_type: PINGED, payload: {}}]\n"))
			if err == nil {
				var v int
				v, err = intents.Deploy(ctx, pool, d)
				versions <- v
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(versions)
	seen := map[int]bool{}
	for v := range versions {
		seen[v] = true
	}
	require.Len(t, seen, n)
	for v := 1; v <= n; v++ {
		require.True(t, seen[v], "version %d", v)
	}
}

func TestCostLimitAtEvaluation(t *testing.T) {
	ctx, pool := dbSetup(t)
	// Deployed under a generous limit, evaluated under a small one: the
	// evaluation stops at the limit.
	deployYAML(t, ctx, pool, `
intent_type: Sum
emits: [{event_type: SUMMED, payload: {n: "intent.payload.items.map(x, x * 2).size()"}}]
`, intents.WithCostLimit(1_000_000_000))
	cat, err := intents.NewCatalog(ctx, pool, nil, intents.WithCostLimit(1000))
	require.NoError(t, err)
	items := make([]any, 2000)
	for i := range items {
		items[i] = int64(i)
	}
	in := intents.Intent{IntentID: "i", IntentType: "Sum", EntityID: "e", ForkID: "f", Payload: map[string]any{"items": items}}
	_, err = cat.Decide(ctx, in, intents.NewReader(pool))
	var ee *intents.EvalError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, "emits[0].payload.n: CEL cost limit 1000 exceeded", ee.Error())

	in.Payload = map[string]any{"items": items[:10]}
	d, err := cat.Decide(ctx, in, intents.NewReader(pool))
	require.NoError(t, err)
	require.JSONEq(t, `{"n":10}`, string(d.Events[0].Payload))
}

func TestReaderReadsRowsInTheTransaction(t *testing.T) {
	ctx, pool := dbSetup(t)
	ddl, err := exampleprojections.DDL("artist_followers")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ddl)
	require.NoError(t, err)
	for _, name := range exampleintents.Names() {
		data, err := exampleintents.Document(name)
		require.NoError(t, err)
		doc, err := intents.Parse(data)
		require.NoError(t, err)
		_, err = intents.Deploy(ctx, pool, doc)
		require.NoError(t, err)
	}
	cat, err := intents.NewCatalog(ctx, pool, nil)
	require.NoError(t, err)
	follow := intents.Intent{IntentID: "i", IntentType: "FollowArtist", EntityID: "user-1", ForkID: "f",
		Payload: map[string]any{"artistId": "artist-9"}}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO artist_followers VALUES ('user-1', 'artist-9', '2026-12-02T12:00:00Z')`)
		require.NoError(t, err)
		d, err := cat.Decide(ctx, follow, intents.NewReader(tx))
		require.NoError(t, err)
		require.Equal(t, "not_already_following", d.Rule, "the row written in the same transaction is seen")
		return errors.New("roll back")
	})
	require.EqualError(t, err, "roll back")
	d, err := cat.Decide(ctx, follow, intents.NewReader(pool))
	require.NoError(t, err)
	require.False(t, d.Rejected())

	r := intents.NewReader(pool)
	_, err = pool.Exec(ctx, `INSERT INTO artist_followers VALUES ('u', 'a', now()), ('u', 'b', now())`)
	require.NoError(t, err)
	row, err := r.Read(ctx, "artist_followers", []intents.KeyColumn{{Name: "user_id", Value: "u"}, {Name: "artist_id", Value: "a"}})
	require.NoError(t, err)
	require.Equal(t, "a", row["artist_id"])
	require.IsType(t, "", row["followed_at"], "timestamps are strings, as to_jsonb renders them")
	_, err = r.Read(ctx, "artist_followers", []intents.KeyColumn{{Name: "user_id", Value: "u"}})
	require.EqualError(t, err, "the key matches more than one row")
	_, err = r.Read(ctx, "no_such_table", []intents.KeyColumn{{Name: "id", Value: "u"}})
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "42P01", pe.Code)
}
