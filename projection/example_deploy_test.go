package projection_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/projection"
)

// Deploy stores a validated IR document as the next version of its
// projection, as `causet projections deploy` does; the engine of every worker
// and bridge on the database uses it from its next apply on.
//
// It needs PostgreSQL: DATABASE_URL must name a database migrated by `causet
// migrate up`, so this example is compiled but not run. The projection's own
// table is the user's to create (the examples ship theirs as NAME.sql); Deploy
// does not need it, the applies do. On a freshly migrated database it prints
// version 1, and List then shows that version as the newest.
func ExampleDeploy() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	ddl, err := exampleprojections.DDL("artist_followers")
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		panic(err)
	}

	src, err := exampleprojections.Document("artist_followers")
	if err != nil {
		panic(err)
	}
	doc, err := projection.Parse(src)
	if err != nil {
		panic(err) // a *projection.ValidationError lists the problems
	}
	version, err := projection.Deploy(ctx, pool, doc)
	if err != nil {
		panic(err)
	}
	fmt.Println("deployed", doc.Name, "version", version)

	deployed, err := projection.List(ctx, pool)
	if err != nil {
		panic(err)
	}
	for _, d := range deployed {
		fmt.Println(d.Name, d.Version, d.SourceEvents)
	}
}
