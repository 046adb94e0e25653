package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/projection"
)

// DemoFollowersDDL is the artist_followers table of `causet dev --demo`:
// the example's table without its followed_at column, so every
// ARTIST_FOLLOWED event fails with the seed's `column "followed_at" does not
// exist` until the schema is fixed with [FixFollowersSQL].
const DemoFollowersDDL = `CREATE TABLE IF NOT EXISTS artist_followers (
    user_id   text NOT NULL,
    artist_id text NOT NULL,
    PRIMARY KEY (user_id, artist_id)
);`

// FixFollowersSQL adds the column the demo leaves out.
const FixFollowersSQL = `ALTER TABLE artist_followers ADD COLUMN IF NOT EXISTS followed_at timestamptz;`

// Deployed is one example projection set up by SetupExamples.
type Deployed struct {
	Name    string
	Version int
	// New is false when this exact document was already the newest version.
	New bool
}

// SetupExamples applies the example tables' DDL (in demo mode
// artist_followers without followed_at, see DemoFollowersDDL) and deploys
// every example IR document unless the same document is already the newest
// deployed version of its projection.
func SetupExamples(ctx context.Context, pool *pgxpool.Pool, demo bool) ([]Deployed, error) {
	if err := projection.EnsureSchema(ctx, pool); err != nil {
		return nil, err
	}
	current, err := projection.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []Deployed
	for _, name := range exampleprojections.Names() {
		ddl, err := exampleprojections.DDL(name)
		if err != nil {
			return nil, err
		}
		if demo && name == "artist_followers" {
			ddl = DemoFollowersDDL
		}
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create table of example %s: %w", name, err)
		}
		raw, err := exampleprojections.Document(name)
		if err != nil {
			return nil, err
		}
		doc, err := projection.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("example %s: %w", name, err)
		}
		if v, ok := sameAsDeployed(current, doc); ok {
			out = append(out, Deployed{Name: doc.Name, Version: v})
			continue
		}
		v, err := projection.Deploy(ctx, pool, doc)
		if err != nil {
			return nil, err
		}
		out = append(out, Deployed{Name: doc.Name, Version: v, New: true})
	}
	return out, nil
}

func sameAsDeployed(current []projection.Deployment, doc *projection.Document) (int, bool) {
	for _, d := range current {
		if d.Name != doc.Name || d.Document == nil {
			continue
		}
		a, errA := json.Marshal(d.Document)
		b, errB := json.Marshal(doc)
		if errA == nil && errB == nil && reflect.DeepEqual(a, b) {
			return d.Version, true
		}
	}
	return 0, false
}

// DemoEvent returns the i-th event of the demo stream (i from 0). Out of
// every 10 events, 7 are TRACK_PLAYED with days ≥ 1 and 1 is
// ARTIST_UNFOLLOWED (these succeed); 1 is ARTIST_FOLLOWED (fails while
// artist_followers lacks followed_at: SQL error) and 1 is TRACK_PLAYED with
// days 0 (fails: division by zero, IR evaluation error). Failing events have
// an entity of their own, so they never hold up the successful ones. runID
// makes event IDs unique across runs of the demo.
func DemoEvent(runID string, i int, now time.Time) event.Envelope {
	artist := "artist-" + strconv.Itoa(i%7+1)
	ev := event.Envelope{
		EventID:    fmt.Sprintf("demo-%s-%06d", runID, i),
		ForkID:     "production",
		IntentID:   fmt.Sprintf("intent-%s-%06d", runID, i),
		Sequence:   int64(i + 1),
		OccurredAt: now.UTC().Truncate(time.Millisecond),
	}
	payload := map[string]any{"artistId": artist}
	switch i % 10 {
	case 3:
		ev.EventType, ev.EntityID = "ARTIST_FOLLOWED", fmt.Sprintf("fan-%s-%d", runID, i)
	case 7:
		ev.EventType, ev.EntityID = "TRACK_PLAYED", fmt.Sprintf("listener-%s-%d", runID, i)
		payload["plays"], payload["days"] = 3, 0
	case 5:
		ev.EventType, ev.EntityID = "ARTIST_UNFOLLOWED", "user-"+strconv.Itoa(i%13+1)
	default:
		ev.EventType, ev.EntityID = "TRACK_PLAYED", "user-"+strconv.Itoa(i%13+1)
		payload["plays"], payload["days"] = i%5+1, i%7+1
	}
	ev.Payload, _ = json.Marshal(payload)
	return ev
}
