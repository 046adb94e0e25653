package projection

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/catalog"
)

// NotifyChannel is the LISTEN/NOTIFY channel Deploy notifies; the payload is
// "<name>:<version>".
const NotifyChannel = "causet_projections"

// versions is the IR version store.
var versions = catalog.Versions{
	Kind:    "projection",
	Table:   "causet_projection_versions",
	Key:     "name",
	Channel: NotifyChannel,
	// The row lock on the catalog serializes deploys.
	Serialize: func(ctx context.Context, tx pgx.Tx, _ string) error {
		_, err := tx.Exec(ctx, "UPDATE causet_projection_catalog SET version = version + 1")
		return err
	},
}

// Deploy validates doc and stores it as version N+1 of its projection
// (N = newest deployed version, 0 if none), then notifies NotifyChannel.
// Concurrent deploys are serialized; once Deploy returns, every later apply
// uses the new version. opts are Validate's.
func Deploy(ctx context.Context, pool *pgxpool.Pool, doc *Document, opts ...Option) (int, error) {
	if err := Validate(doc, opts...); err != nil {
		return 0, err
	}
	return versions.Deploy(ctx, pool, doc.Name, doc)
}

// Deployment describes the newest deployed version of a projection.
type Deployment struct {
	Name         string
	Version      int
	DeployedAt   time.Time
	SourceEvents []string
	Document     *Document
}

type querier = catalog.Querier

func loadLatest(ctx context.Context, q querier) ([]Deployment, error) {
	vs, err := catalog.LoadLatest[Document](ctx, q, versions)
	return deployments(vs), err
}

// List returns the newest deployed version of every projection, ordered by
// name. It returns an empty list when the schema does not exist yet.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Deployment, error) {
	vs, err := catalog.List[Document](ctx, pool, versions)
	return deployments(vs), err
}

func deployments(vs []catalog.Version[Document]) []Deployment {
	var out []Deployment
	for _, v := range vs {
		out = append(out, Deployment{Name: v.Key, Version: v.Version, DeployedAt: v.DeployedAt,
			SourceEvents: v.Document.SourceEvents, Document: v.Document})
	}
	return out
}
