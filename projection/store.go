package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
CREATE TABLE IF NOT EXISTS causet_projection_applied (
	projection text        NOT NULL,
	fork_id    text        NOT NULL,
	event_id   text        NOT NULL,
	ir_version int         NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (projection, fork_id, event_id)
);
-- One row; its version grows with every deploy, so an engine can tell with
-- one cheap read whether its cache is current.
CREATE TABLE IF NOT EXISTS causet_projection_catalog (
	id      boolean PRIMARY KEY DEFAULT true CHECK (id),
	version bigint  NOT NULL
);
INSERT INTO causet_projection_catalog (id, version) VALUES (true, 0) ON CONFLICT DO NOTHING;
`

// EnsureSchema creates the IR version store, the dedupe ledger and the
// catalog counter if they do not exist. It is idempotent and safe to run
// concurrently (it holds a transaction-scoped advisory lock).
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schemaSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure projection schema: %w", err)
	}
	return nil
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
	body, err := json.Marshal(doc)
	if err != nil {
		return 0, fmt.Errorf("encode projection document: %w", err)
	}
	if err := EnsureSchema(ctx, pool); err != nil {
		return 0, err
	}
	var version int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The row lock on the catalog serializes deploys.
		if _, err := tx.Exec(ctx, "UPDATE causet_projection_catalog SET version = version + 1"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx,
			"SELECT COALESCE(max(version), 0) + 1 FROM causet_projection_versions WHERE name = $1",
			doc.Name).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			"INSERT INTO causet_projection_versions (name, version, document) VALUES ($1, $2, $3)",
			doc.Name, version, string(body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, fmt.Sprintf("%s:%d", doc.Name, version))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deploy projection %s: %w", doc.Name, err)
	}
	return version, nil
}

// Deployment describes the newest deployed version of a projection.
type Deployment struct {
	Name         string
	Version      int
	DeployedAt   time.Time
	SourceEvents []string
	Document     *Document
}

const latestSQL = `SELECT DISTINCT ON (name) name, version, document, deployed_at
FROM causet_projection_versions ORDER BY name, version DESC`

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func loadLatest(ctx context.Context, q querier) ([]Deployment, error) {
	rows, err := q.Query(ctx, latestSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Deployment
	for rows.Next() {
		var d Deployment
		var body []byte
		if err := rows.Scan(&d.Name, &d.Version, &body, &d.DeployedAt); err != nil {
			return nil, err
		}
		var doc Document
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, fmt.Errorf("projection %s version %d: decode document: %w", d.Name, d.Version, err)
		}
		d.Document = &doc
		d.SourceEvents = doc.SourceEvents
		out = append(out, d)
	}
	return out, rows.Err()
}

// List returns the newest deployed version of every projection, ordered by
// name. It returns an empty list when the schema does not exist yet.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Deployment, error) {
	out, err := loadLatest(ctx, pool)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list projections: %w", err)
	}
	return out, nil
}
