package projection_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var occurred = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

type fixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	engine *projection.Engine
}

// setup gives a fresh database with the given DDL (an example name like
// "artist_followers" means its .sql file) and an engine.
func setup(t testing.TB, ddl ...string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testenv.Postgres(t)
	for _, d := range ddl {
		if !strings.Contains(d, " ") {
			var err error
			d, err = exampleprojections.DDL(d)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, d)
		require.NoError(t, err)
	}
	engine, err := projection.NewEngine(ctx, pool, nil)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	return &fixture{ctx: ctx, pool: pool, engine: engine}
}

// deploy deploys an example by name, or a YAML document.
func (f *fixture) deploy(t testing.TB, nameOrYAML string) int {
	t.Helper()
	data := []byte(nameOrYAML)
	if !strings.Contains(nameOrYAML, "\n") {
		var err error
		data, err = exampleprojections.Document(nameOrYAML)
		require.NoError(t, err)
	}
	doc, err := projection.Parse(data)
	require.NoError(t, err)
	// The package-level Deploy does not touch the engine: the engine must
	// notice the new version on its own.
	v, err := projection.Deploy(f.ctx, f.pool, doc)
	require.NoError(t, err)
	return v
}

func followed(id, user, artist string) event.Envelope {
	return event.Envelope{EventID: id, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production",
		OccurredAt: occurred, Payload: []byte(fmt.Sprintf(`{"artistId":%q}`, artist))}
}

func unfollowed(id, user, artist string) event.Envelope {
	e := followed(id, user, artist)
	e.EventType = "ARTIST_UNFOLLOWED"
	return e
}

func played(id, artist string, plays, days int) event.Envelope {
	return event.Envelope{EventID: id, EventType: "TRACK_PLAYED", EntityID: "user-1", ForkID: "production",
		OccurredAt: occurred, Payload: []byte(fmt.Sprintf(`{"artistId":%q,"plays":%d,"days":%d}`, artist, plays, days))}
}

func (f *fixture) followers(t testing.TB) map[string]time.Time {
	t.Helper()
	return testenv.Followers(t, f.ctx, f.pool)
}

func (f *fixture) stats(t testing.TB, artist string) (plays int64, perDay *int64) {
	t.Helper()
	err := f.pool.QueryRow(f.ctx, "SELECT plays, plays_per_day FROM artist_stats WHERE artist_id = $1", artist).Scan(&plays, &perDay)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	require.NoError(t, err)
	return plays, perDay
}

func (f *fixture) apply(t testing.TB, projectionName string, ev event.Envelope) projection.Result {
	t.Helper()
	res, err := f.engine.Apply(f.ctx, projectionName, ev)
	require.NoError(t, err)
	return res
}

func requireApplied(t testing.TB, res projection.Result) {
	t.Helper()
	require.Nil(t, res.Err)
	require.Equal(t, projection.StatusApplied, res.Status)
}

func TestUpsertDeleteIncrement(t *testing.T) {
	f := setup(t, "artist_followers", "artist_stats")
	require.Equal(t, 1, f.deploy(t, "artist_followers"))
	require.Equal(t, 1, f.deploy(t, "artist_stats"))

	res := f.apply(t, "artist_followers", followed("e1", "user-1", "artist-9"))
	requireApplied(t, res)
	require.Equal(t, 1, res.IRVersion)
	require.Equal(t, "e1", res.EventID)
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, f.followers(t))

	// Upsert overwrites the non-key columns.
	again := followed("e2", "user-1", "artist-9")
	again.OccurredAt = occurred.Add(time.Hour)
	requireApplied(t, f.apply(t, "artist_followers", again))
	requireApplied(t, f.apply(t, "artist_followers", followed("e3", "user-2", "artist-9")))
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred.Add(time.Hour), "user-2/artist-9": occurred}, f.followers(t))

	requireApplied(t, f.apply(t, "artist_followers", unfollowed("e4", "user-1", "artist-9")))
	require.Equal(t, map[string]time.Time{"user-2/artist-9": occurred}, f.followers(t))
	// Deleting a row that is not there is fine.
	requireApplied(t, f.apply(t, "artist_followers", unfollowed("e5", "user-1", "artist-9")))

	requireApplied(t, f.apply(t, "artist_stats", played("p1", "artist-9", 3, 1)))
	requireApplied(t, f.apply(t, "artist_stats", played("p2", "artist-9", 4, 2)))
	plays, perDay := f.stats(t, "artist-9")
	require.EqualValues(t, 7, plays)
	require.EqualValues(t, 2, *perDay) // set, not incremented: 4 / 2

	// The engine answers from its cache which projections list a type.
	require.Equal(t, []string{"artist_followers"}, f.engine.Projections("ARTIST_UNFOLLOWED"))
	require.Equal(t, []string{"artist_stats"}, f.engine.Projections("TRACK_PLAYED"))
	require.Empty(t, f.engine.Projections("USER_CREATED"))

	deps, err := projection.List(f.ctx, f.pool)
	require.NoError(t, err)
	require.Len(t, deps, 2)
	require.Equal(t, "artist_followers", deps[0].Name)
	require.Equal(t, 1, deps[0].Version)
	require.Equal(t, []string{"ARTIST_FOLLOWED", "ARTIST_UNFOLLOWED"}, deps[0].SourceEvents)
	require.WithinDuration(t, time.Now(), deps[0].DeployedAt, time.Minute)
}

func TestSameEventTwiceChangesOnce(t *testing.T) {
	f := setup(t, "artist_followers", "artist_stats")
	f.deploy(t, "artist_followers")
	f.deploy(t, "artist_stats")

	ev := followed("e1", "user-1", "artist-9")
	requireApplied(t, f.apply(t, "artist_followers", ev))
	// A redelivery is the same envelope; even with a payload changed, it
	// cannot change the row.
	moved := ev
	moved.Payload = []byte(`{"artistId":"artist-10"}`)
	res := f.apply(t, "artist_followers", moved)
	require.Equal(t, projection.StatusDuplicate, res.Status)
	require.Nil(t, res.Err)
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, f.followers(t))

	// Increment: applied once, however often it is delivered, in any path.
	p := played("p1", "artist-9", 5, 1)
	requireApplied(t, f.apply(t, "artist_stats", p))
	require.Equal(t, projection.StatusDuplicate, f.apply(t, "artist_stats", p).Status)
	results, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{p, p})
	require.NoError(t, err)
	require.Len(t, results, 2)
	for _, r := range results {
		require.Equal(t, projection.StatusDuplicate, r.Status)
	}
	plays, _ := f.stats(t, "artist-9")
	require.EqualValues(t, 5, plays)

	// The same eventId in another fork is another event.
	other := p
	other.ForkID = "staging"
	requireApplied(t, f.apply(t, "artist_stats", other))
	plays, _ = f.stats(t, "artist-9")
	require.EqualValues(t, 10, plays)
}

func TestNewVersionIsUsedByTheNextApply(t *testing.T) {
	f := setup(t, testenv.FollowersNoFollowedAtDDL)
	// Version 1 writes followed_at, which the table lacks.
	require.Equal(t, 1, f.deploy(t, "artist_followers"))
	ev := followed("e1", "user-1", "artist-9")
	res := f.apply(t, "artist_followers", ev)
	require.Equal(t, projection.StatusFailed, res.Status)
	require.Equal(t, 1, res.IRVersion)

	// The fix, deployed while the event waits for its next attempt.
	fixed := `name: artist_followers
source_events: [ARTIST_FOLLOWED, ARTIST_UNFOLLOWED]
table: artist_followers
key: [user_id, artist_id]
on:
  ARTIST_FOLLOWED: {op: upsert, columns: {user_id: event.entityId, artist_id: event.payload.artistId}}
  ARTIST_UNFOLLOWED: {op: delete, columns: {user_id: event.entityId, artist_id: event.payload.artistId}}
`
	require.Equal(t, 2, f.deploy(t, fixed))
	res = f.apply(t, "artist_followers", ev)
	requireApplied(t, res)
	require.Equal(t, 2, res.IRVersion)

	// Every deploy is visible to the very next attempt, without waiting for
	// the notification: each version writes its own number.
	_, err := f.pool.Exec(f.ctx, "CREATE TABLE versions_seen (id text PRIMARY KEY, v bigint)")
	require.NoError(t, err)
	for i := 1; i <= 20; i++ {
		v := f.deploy(t, fmt.Sprintf(`name: seen
source_events: [PING]
table: versions_seen
key: [id]
on:
  PING: {op: upsert, columns: {id: event.entityId, v: %d}}
`, i))
		require.Equal(t, i, v)
		ping := event.Envelope{EventID: fmt.Sprint("ping-", i), EventType: "PING", EntityID: "x", ForkID: "f", Payload: []byte(`{}`)}
		results, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{ping})
		require.NoError(t, err)
		require.Len(t, results, 1)
		require.Equal(t, i, results[0].IRVersion)
		var got int64
		require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT v FROM versions_seen WHERE id = 'x'").Scan(&got))
		require.EqualValues(t, i, got)
	}

	// The listener keeps Projections current without an apply.
	f.deploy(t, `name: later
source_events: [LATE]
table: versions_seen
key: [id]
on:
  LATE: {op: delete, columns: {id: event.entityId}}
`)
	require.Eventually(t, func() bool { return len(f.engine.Projections("LATE")) == 1 }, 10*time.Second, 20*time.Millisecond)
}

func TestMissingColumnIsSQLError(t *testing.T) {
	f := setup(t, testenv.FollowersNoFollowedAtDDL)
	f.deploy(t, "artist_followers")
	for _, apply := range []func(ev event.Envelope) projection.Result{
		func(ev event.Envelope) projection.Result { return f.apply(t, "artist_followers", ev) },
		func(ev event.Envelope) projection.Result {
			results, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{ev})
			require.NoError(t, err)
			require.Len(t, results, 1)
			return results[0]
		},
	} {
		res := apply(followed("e1", "user-1", "artist-9"))
		require.Equal(t, projection.StatusFailed, res.Status)
		require.Equal(t, contract.KindSQL, res.Err.Kind)
		require.Equal(t, contract.KindSQL, projection.Classify(res.Err))
		require.Contains(t, res.Err.Error(), `column "followed_at"`)
		require.Contains(t, res.Err.Error(), "does not exist")
	}
	// Unfollow does not touch the missing column and works.
	requireApplied(t, f.apply(t, "artist_followers", unfollowed("e2", "user-1", "artist-9")))

	// After the migration the same event applies (no stale prepared statement).
	_, err := f.pool.Exec(f.ctx, "ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz")
	require.NoError(t, err)
	requireApplied(t, f.apply(t, "artist_followers", followed("e1", "user-1", "artist-9")))
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, f.followers(t))
}

func TestDivisionByZeroIsIREvalError(t *testing.T) {
	f := setup(t, "artist_stats")
	f.deploy(t, "artist_stats")
	res := f.apply(t, "artist_stats", played("p1", "artist-9", 3, 0))
	require.Equal(t, projection.StatusFailed, res.Status)
	require.Equal(t, contract.KindIREval, res.Err.Kind)
	require.Contains(t, res.Err.Error(), "division by zero")
	require.Contains(t, res.Err.Error(), "on.TRACK_PLAYED.columns.plays_per_day")
	plays, _ := f.stats(t, "artist-9")
	require.Zero(t, plays)
	// Nothing was recorded in the ledger: a later attempt may still apply it.
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&n))
	require.Zero(t, n)

	// The same failing event twice in a batch: both fail, neither is a duplicate.
	results, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{played("p1", "artist-9", 3, 0), played("p1", "artist-9", 3, 0), played("p3", "artist-9", 3, 1)})
	require.NoError(t, err)
	require.Len(t, results, 3)
	for _, r := range results[:2] {
		require.Equal(t, projection.StatusFailed, r.Status)
		require.Equal(t, contract.KindIREval, r.Err.Kind)
	}
	require.Equal(t, projection.StatusApplied, results[2].Status)
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT count(*) FROM causet_projection_applied").Scan(&n))
	require.Equal(t, 1, n)

	missing := played("p2", "artist-9", 3, 1)
	missing.Payload = []byte(`{"artistId":"artist-9"}`)
	res = f.apply(t, "artist_stats", missing)
	require.Equal(t, contract.KindIREval, res.Err.Kind)
	require.Contains(t, res.Err.Error(), "no such key: plays")
}

func TestConnectionError(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	requireApplied(t, f.apply(t, "artist_followers", followed("e0", "user-0", "artist-9")))

	testenv.StopPostgres(t)
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	res, err := f.engine.Apply(ctx, "artist_followers", followed("e1", "user-1", "artist-9"))
	require.Error(t, err)
	require.Equal(t, contract.KindConnection, projection.Classify(err))
	require.Equal(t, projection.StatusFailed, res.Status)
	require.Equal(t, contract.KindConnection, res.Err.Kind)

	results, err := f.engine.ApplyBatch(ctx, []event.Envelope{followed("e1", "user-1", "artist-9"), followed("e2", "user-2", "artist-9")})
	require.Error(t, err)
	require.Equal(t, contract.KindConnection, projection.Classify(err))
	require.Len(t, results, 2)
	for _, r := range results {
		require.Equal(t, projection.StatusFailed, r.Status)
		require.Equal(t, contract.KindConnection, r.Err.Kind)
	}

	testenv.StartPostgres(t)
	requireApplied(t, f.apply(t, "artist_followers", followed("e1", "user-1", "artist-9")))
	results, err = f.engine.ApplyBatch(f.ctx, []event.Envelope{followed("e1", "user-1", "artist-9"), followed("e2", "user-2", "artist-9")})
	require.NoError(t, err)
	require.Equal(t, projection.StatusDuplicate, results[0].Status)
	require.Equal(t, projection.StatusApplied, results[1].Status)
	require.Len(t, f.followers(t), 3)
}

func TestInjectionInPayloadIsData(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	evil := `'); DROP TABLE artist_followers; --`
	ev := followed(`e1'; DELETE FROM causet_projection_applied; --`, `"user"; DROP TABLE x`, evil)
	ev.ForkID = `prod' OR '1'='1`
	requireApplied(t, f.apply(t, "artist_followers", ev))
	require.Equal(t, map[string]time.Time{`"user"; DROP TABLE x/` + evil: occurred}, f.followers(t))
	// The ledger's one row is the key of exactly this fork and event ID.
	var key, sqlKey string
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT key::text, causet_applied_key('artist_followers', $1, $2)::text FROM causet_projection_applied",
		ev.ForkID, ev.EventID).Scan(&key, &sqlKey))
	require.Equal(t, projection.DedupeKey("artist_followers", ev.ForkID, ev.EventID).String(), key)
	require.Equal(t, key, sqlKey)
	require.Equal(t, 1, f.count(t, "SELECT count(*) FROM causet_projection_applied"))
}

func TestBatchIsolatesFailures(t *testing.T) {
	f := setup(t, "artist_followers", "artist_stats")
	f.deploy(t, "artist_followers")
	f.deploy(t, "artist_stats")
	requireApplied(t, f.apply(t, "artist_followers", followed("old", "user-0", "artist-0")))

	nullArtist := followed("null-artist", "user-x", "")
	nullArtist.Payload = []byte(`{"artistId": null}`) // NOT NULL violation at execution: sql
	invalid := followed("invalid", "user-y", "artist-9")
	invalid.ForkID = "" // not an envelope: invalid_event
	evs := []event.Envelope{
		followed("a", "user-1", "artist-9"), // 0 applied
		played("p-zero", "artist-9", 3, 0),  // 1 ir_eval
		{EventID: "u", EventType: "USER_CREATED", EntityID: "u", ForkID: "f", Payload: []byte(`{}`)}, // 2 no projection: no result
		nullArtist,                            // 3 sql
		followed("b", "user-2", "artist-9"),   // 4 applied
		followed("a", "user-1", "artist-9"),   // 5 duplicate of 0
		followed("old", "user-0", "artist-0"), // 6 duplicate of an earlier batch
		invalid,                               // 7 invalid_event
		played("p-ok", "artist-9", 4, 2),      // 8 applied
		unfollowed("c", "user-2", "artist-9"), // 9 applied, after 4
	}
	var seen []projection.Result
	results, err := f.engine.ApplyBatch(f.ctx, evs, projection.ApplyOptions{
		BeforeCommit: func(ctx context.Context, tx pgx.Tx, results []projection.Result) error {
			seen = results
			_, err := tx.Exec(ctx, "CREATE TABLE hook_ran (x int)")
			return err
		},
	})
	require.NoError(t, err)
	type row struct {
		index  int
		status projection.Status
		kind   contract.ErrorKind
	}
	var got []row
	for _, r := range results {
		var kind contract.ErrorKind
		if r.Err != nil {
			kind = r.Err.Kind
		}
		got = append(got, row{r.Index, r.Status, kind})
		require.Equal(t, evs[r.Index].EventID, r.EventID)
		require.Equal(t, 1, r.IRVersion)
	}
	require.Equal(t, []row{
		{0, projection.StatusApplied, ""},
		{1, projection.StatusFailed, contract.KindIREval},
		{3, projection.StatusFailed, contract.KindSQL},
		{4, projection.StatusApplied, ""},
		{5, projection.StatusDuplicate, ""},
		{6, projection.StatusDuplicate, ""},
		{7, projection.StatusFailed, contract.KindInvalidEvent},
		{8, projection.StatusApplied, ""},
		{9, projection.StatusApplied, ""},
	}, got)
	require.Contains(t, results[2].Err.Error(), `null value in column "artist_id"`)
	require.Equal(t, results, seen)
	require.Equal(t, map[string]time.Time{"user-0/artist-0": occurred, "user-1/artist-9": occurred}, f.followers(t))
	plays, _ := f.stats(t, "artist-9")
	require.EqualValues(t, 4, plays)
	var hook bool
	require.NoError(t, f.pool.QueryRow(f.ctx, "SELECT to_regclass('hook_ran') IS NOT NULL").Scan(&hook))
	require.True(t, hook)
}

func TestBatchManyFailures(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	var evs []event.Envelope
	want := map[string]time.Time{}
	for i := range 300 {
		ev := followed(fmt.Sprint("e", i), fmt.Sprint("user-", i), "artist-9")
		if i%3 == 1 || (i > 100 && i < 160) {
			ev.Payload = []byte(`{"artistId": null}`)
		} else {
			want[fmt.Sprint("user-", i, "/artist-9")] = occurred
		}
		evs = append(evs, ev)
	}
	results, err := f.engine.ApplyBatch(f.ctx, evs)
	require.NoError(t, err)
	require.Len(t, results, 300)
	applied := 0
	for i, r := range results {
		require.Equal(t, i, r.Index)
		if _, ok := want[fmt.Sprint("user-", i, "/artist-9")]; ok {
			require.Equal(t, projection.StatusApplied, r.Status, i)
			applied++
		} else {
			require.Equal(t, projection.StatusFailed, r.Status, i)
			require.Equal(t, contract.KindSQL, r.Err.Kind)
		}
	}
	require.Equal(t, len(want), applied)
	require.Equal(t, want, f.followers(t))
}

func TestBatchWholeFailures(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	hookErr := errors.New("blocked keys: boom")
	results, err := f.engine.ApplyBatch(f.ctx, []event.Envelope{followed("a", "u", "x")}, projection.ApplyOptions{
		BeforeCommit: func(context.Context, pgx.Tx, []projection.Result) error { return hookErr },
	})
	require.ErrorIs(t, err, hookErr)
	require.Len(t, results, 1)
	require.Equal(t, projection.StatusFailed, results[0].Status)
	require.Empty(t, f.followers(t))

	// Nothing matched: no results, no error.
	results, err = f.engine.ApplyBatch(f.ctx, []event.Envelope{{EventID: "x", EventType: "OTHER", EntityID: "e", ForkID: "f", Payload: []byte(`{}`)}})
	require.NoError(t, err)
	require.Empty(t, results)
	results, err = f.engine.ApplyBatch(f.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, results)
}

func TestApplySkippedAndNotDeployed(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	res := f.apply(t, "artist_followers", played("p", "a", 1, 1))
	require.Equal(t, projection.StatusSkipped, res.Status)
	res = f.apply(t, "nope", followed("e", "u", "a"))
	require.Equal(t, projection.StatusFailed, res.Status)
	require.Equal(t, contract.KindIREval, res.Err.Kind)
	require.ErrorIs(t, res.Err, projection.ErrNotDeployed)
}

func TestDuplicateWinsOverNewFailure(t *testing.T) {
	f := setup(t, "artist_followers")
	f.deploy(t, "artist_followers")
	ev := followed("e1", "user-1", "artist-9")
	requireApplied(t, f.apply(t, "artist_followers", ev))
	// A later version that cannot evaluate this event: the redelivery is
	// still a duplicate, not a failure to retry.
	f.deploy(t, strings.Replace(mustExample(t, "artist_followers"), "followed_at: event.occurredAt", "followed_at: event.payload.missing", 1))
	res := f.apply(t, "artist_followers", ev)
	require.Equal(t, projection.StatusDuplicate, res.Status)
	require.Equal(t, 2, res.IRVersion)
	res = f.apply(t, "artist_followers", followed("e2", "user-1", "artist-9"))
	require.Equal(t, contract.KindIREval, res.Err.Kind)
}

func mustExample(t testing.TB, name string) string {
	t.Helper()
	b, err := exampleprojections.Document(name)
	require.NoError(t, err)
	return string(b)
}

func TestConcurrentDeploys(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	doc, err := projection.Parse([]byte(mustExample(t, "artist_followers")))
	require.NoError(t, err)
	var wg sync.WaitGroup
	versions := make(chan int, 8)
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			v, err := projection.Deploy(ctx, pool, doc)
			if err != nil {
				errs <- err
			}
			versions <- v
		})
	}
	wg.Wait()
	close(versions)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[int]bool{}
	for v := range versions {
		seen[v] = true
	}
	require.Equal(t, map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true}, seen)

	deps, err := projection.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, deps, 1)
	require.Equal(t, 8, deps[0].Version)

	_, err = projection.Deploy(ctx, pool, &projection.Document{Name: "bad"})
	var ve *projection.ValidationError
	require.ErrorAs(t, err, &ve)
}

func TestListWithoutSchema(t *testing.T) {
	deps, err := projection.List(context.Background(), testenv.Postgres(t))
	require.NoError(t, err)
	require.Empty(t, deps)
}
