package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/client"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intents"
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

// Deployed is one example projection set up by SetupExamples, or intent
// handler set up by SetupExampleIntents.
type Deployed struct {
	// Name is the projection's name or the handler's intent type.
	Name    string
	Version int
	// New is false when this exact document was already the newest version.
	New bool
	// Note says how the deployed document differs from the example, if it
	// does.
	Note string
}

// SetupExamples applies the example tables' DDL (in demo mode
// artist_followers without followed_at, see DemoFollowersDDL) and deploys
// every example IR document unless the same document is already the newest
// deployed version of its projection.
func SetupExamples(ctx context.Context, pool *pgxpool.Pool, demo bool) ([]Deployed, error) {
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

// DemoDroppedRule is the rule of the example PlayTrack handler that
// `causet dev --demo` deploys it without, so that a PlayTrack with days 0 is
// accepted and its TRACK_PLAYED fails in artist_stats with the seed's
// "division by zero" (errorKind ir_eval) instead of being rejected up front.
// Deploying examples/intents/PlayTrack.yaml puts the rule back.
const DemoDroppedRule = "days_positive"

// SetupExampleIntents deploys every example intent handler (examples/intents) unless the same
// document is already the newest deployed version of its intent type. In
// demo mode PlayTrack is deployed without [DemoDroppedRule] (Deployed.Note
// says so).
func SetupExampleIntents(ctx context.Context, pool *pgxpool.Pool, demo bool, opts ...intents.Option) ([]Deployed, error) {
	current, err := intents.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []Deployed
	for _, name := range exampleintents.Names() {
		raw, err := exampleintents.Document(name)
		if err != nil {
			return nil, err
		}
		doc, err := intents.Parse(raw, opts...)
		if err != nil {
			return nil, fmt.Errorf("example intent handler %s: %w", name, err)
		}
		note := ""
		if demo && doc.IntentType == "PlayTrack" {
			doc, note = withoutRule(doc, DemoDroppedRule), "demo: without its "+DemoDroppedRule+" rule"
		}
		if v, ok := sameIntentHandler(current, doc); ok {
			out = append(out, Deployed{Name: doc.IntentType, Version: v, Note: note})
			continue
		}
		v, err := intents.Deploy(ctx, pool, doc, opts...)
		if err != nil {
			return nil, err
		}
		out = append(out, Deployed{Name: doc.IntentType, Version: v, New: true, Note: note})
	}
	return out, nil
}

// withoutRule is a copy of doc without the rule named name.
func withoutRule(doc *intents.Document, name string) *intents.Document {
	c := *doc
	c.Rules = nil
	for _, r := range doc.Rules {
		if r.Name != name {
			c.Rules = append(c.Rules, r)
		}
	}
	return &c
}

func sameIntentHandler(current []intents.Deployment, doc *intents.Document) (int, bool) {
	b, err := json.Marshal(doc)
	if err != nil {
		return 0, false
	}
	for _, d := range current {
		if d.IntentType != doc.IntentType || d.Document == nil {
			continue
		}
		if a, err := json.Marshal(d.Document); err == nil && bytes.Equal(a, b) {
			return d.Version, true
		}
	}
	return 0, false
}

// DemoIntent returns the i-th intent of the demo traffic (i from 0), which
// `causet dev --demo` submits to its runtime. Out of every 10:
//
//   - 7 are PlayTrack with days ≥ 1: accepted, their TRACK_PLAYED applied;
//   - 1 is UnfollowArtist of an artist the user does not follow: rejected by
//     the handler's "following" rule, nothing written;
//   - 1 is FollowArtist: accepted; its ARTIST_FOLLOWED fails while
//     artist_followers lacks followed_at (SQL error, see DemoFollowersDDL);
//   - 1 is PlayTrack with days 0: accepted by the demo's PlayTrack (deployed
//     without DemoDroppedRule); its TRACK_PLAYED fails with division by zero
//     (IR evaluation error).
//
// Failing events have an entity of their own, so they never hold up the
// successful ones. runID makes intent IDs unique across runs of the demo;
// event n of an intent has the ID <intentId>:<n>.
func DemoIntent(runID string, i int) client.Intent {
	artist := "artist-" + strconv.Itoa(i%7+1)
	in := client.Intent{IntentID: fmt.Sprintf("demo-%s-%06d", runID, i), ForkID: "production"}
	payload := map[string]any{"artistId": artist}
	switch i % 10 {
	case 3:
		in.IntentType, in.EntityID = "FollowArtist", fmt.Sprintf("fan-%s-%d", runID, i)
	case 7:
		in.IntentType, in.EntityID = "PlayTrack", fmt.Sprintf("listener-%s-%d", runID, i)
		payload["trackId"], payload["plays"], payload["days"] = "track-"+strconv.Itoa(i%5+1), 3, 0
	case 5:
		in.IntentType, in.EntityID = "UnfollowArtist", "user-"+strconv.Itoa(i%13+1)
	default:
		in.IntentType, in.EntityID = "PlayTrack", "user-"+strconv.Itoa(i%13+1)
		payload["trackId"], payload["plays"], payload["days"] = "track-"+strconv.Itoa(i%5+1), i%5+1, i%7+1
	}
	in.Payload = payload
	return in
}
