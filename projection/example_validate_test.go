package projection_test

import (
	"errors"
	"fmt"

	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/projection"
)

// Parse decodes and validates an IR document without a database, as `causet
// projections validate` does. A valid document comes back as a
// *projection.Document; an invalid one as a *projection.ValidationError that
// names the path of every fault.
func ExampleParse() {
	valid, err := exampleprojections.Document("artist_followers")
	if err != nil {
		panic(err)
	}
	doc, err := projection.Parse(valid)
	if err != nil {
		panic(err)
	}
	fmt.Println("ok:", doc.Name, doc.Table, doc.SourceEvents)

	invalid := []byte(`
name: Artist-Followers
source_events: [ARTIST_FOLLOWED, ARTIST_UNFOLLOWED]
table: artist_followers
key: [user_id, artist_id]
on:
  ARTIST_FOLLOWED:
    op: upsert
    columns:
      user_id: event.entityId
      followed_at: event.occurredAt
`)
	_, err = projection.Parse(invalid)
	var ve *projection.ValidationError
	if errors.As(err, &ve) {
		fmt.Println("invalid:")
		for _, p := range ve.Problems {
			fmt.Println(" ", p)
		}
	}
	// Output:
	// ok: artist_followers artist_followers [ARTIST_FOLLOWED ARTIST_UNFOLLOWED]
	// invalid:
	//   name: "Artist-Followers" is not a plain SQL identifier (want ^[a-z_][a-z0-9_]{0,62}$)
	//   source_events[1]: event type "ARTIST_UNFOLLOWED" has no entry in on
	//   on.ARTIST_FOLLOWED.columns: missing key column "artist_id"
}
