package projection

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/pgstore"
)

// NotifyChannel is the LISTEN/NOTIFY channel Deploy notifies; the payload is
// "<name>:<version>".
const NotifyChannel = "causet_projections"

// schemaLockKey is the advisory lock taken while creating the schema.
const schemaLockKey int64 = 0x63617573_65740001 // "caus" "et" 1

const schemaSQL = `
CREATE TABLE IF NOT EXISTS causet_projection_versions (
	name        text        NOT NULL,
	version     int         NOT NULL CHECK (version > 0),
	document    jsonb       NOT NULL,
	deployed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, version)
);
-- One row; its version grows with every deploy, so an engine can tell with
-- one cheap read whether its cache is current.
CREATE TABLE IF NOT EXISTS causet_projection_catalog (
	id      boolean PRIMARY KEY DEFAULT true CHECK (id),
	version bigint  NOT NULL
);
INSERT INTO causet_projection_catalog (id, version) VALUES (true, 0) ON CONFLICT DO NOTHING;
` + dedupeSchemaSQL

// EnsureSchema creates the IR version store, the dedupe ledger (migrating
// an unpartitioned one of an earlier release into bucket 0, see dedupe.go)
// and the catalog counter if they do not exist. It is idempotent and safe to run
// concurrently (it holds a transaction-scoped advisory lock).
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return pgstore.EnsureSchema(ctx, pool, "projection", schemaSQL, schemaLockKey)
}

// versions is the IR version store.
var versions = pgstore.Versions{
	Kind:         "projection",
	Table:        "causet_projection_versions",
	Key:          "name",
	Channel:      NotifyChannel,
	EnsureSchema: EnsureSchema,
	// The row lock on the catalog serializes deploys.
	Serialize: func(ctx context.Context, tx pgx.Tx, _ string) error {
		_, err := tx.Exec(ctx, "UPDATE causet_projection_catalog SET version = version + 1")
		return err
	},
}

// Deploy validates doc and stores it as version N+1 of its projection
// (N = newest deployed version, 0 if none), then notifies NotifyChannel.
// Concurrent deploys are serialized; once Deploy returns, every later apply
// uses the new version. It creates the schema if needed. opts are
// Validate's.
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

type querier = pgstore.Querier

func loadLatest(ctx context.Context, q querier) ([]Deployment, error) {
	vs, err := pgstore.LoadLatest[Document](ctx, q, versions)
	return deployments(vs), err
}

// List returns the newest deployed version of every projection, ordered by
// name. It returns an empty list when the schema does not exist yet.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Deployment, error) {
	vs, err := pgstore.List[Document](ctx, pool, versions)
	return deployments(vs), err
}

func deployments(vs []pgstore.Version[Document]) []Deployment {
	var out []Deployment
	for _, v := range vs {
		out = append(out, Deployment{Name: v.Key, Version: v.Version, DeployedAt: v.DeployedAt,
			SourceEvents: v.Document.SourceEvents, Document: v.Document})
	}
	return out
}
