package catalog

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

// LockClass is the first key of the advisory locks taken with two int4 keys
// ("caus"), a space of their own that no single-bigint lock (the projection
// schema's, the relay's) can collide with.
const LockClass int32 = 0x63617573

// IsUndefinedTable reports whether err is PostgreSQL's undefined_table
// (42P01).
func IsUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// Versions is a table of versioned documents: Table (Key text, version int,
// document jsonb, deployed_at timestamptz) with one row per deployed version
// of each key.
type Versions struct {
	// Kind names a document in errors: "projection", "intent handler".
	Kind string
	// Table and Key name the table and its key column.
	Table, Key string
	// Channel is the LISTEN/NOTIFY channel a deploy notifies with
	// "<key>:<version>".
	Channel string
	// Serialize runs first in a deploy's transaction and serializes
	// concurrent deploys of key.
	Serialize func(ctx context.Context, tx pgx.Tx, key string) error
}

// Deploy stores doc, JSON-encoded, as version N+1 of key (N the newest
// deployed version, 0 if none) and notifies Channel. It returns the new
// version.
func (v Versions) Deploy(ctx context.Context, pool *pgxpool.Pool, key string, doc any) (int, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return 0, fmt.Errorf("encode %s document: %w", v.Kind, err)
	}
	var version int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := v.Serialize(ctx, tx, key); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx,
			fmt.Sprintf("SELECT COALESCE(max(version), 0) + 1 FROM %s WHERE %s = $1", v.Table, v.Key),
			key).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			fmt.Sprintf("INSERT INTO %s (%s, version, document) VALUES ($1, $2, $3)", v.Table, v.Key),
			key, version, string(body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", v.Channel, fmt.Sprintf("%s:%d", key, version))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deploy %s %s: %w", v.Kind, key, err)
	}
	return version, nil
}

// Querier is what LoadLatest reads with: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Version is one deployed version of a document.
type Version[D any] struct {
	Key        string
	Version    int
	DeployedAt time.Time
	Document   *D
}

// LoadLatest returns the newest version of every key, ordered by key, each
// document decoded into a new D.
func LoadLatest[D any](ctx context.Context, q Querier, v Versions) ([]Version[D], error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT DISTINCT ON (%[2]s) %[2]s, version, document, deployed_at
FROM %[1]s ORDER BY %[2]s, version DESC`, v.Table, v.Key))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Version[D], error) {
		var d Version[D]
		var body []byte
		if err := row.Scan(&d.Key, &d.Version, &body, &d.DeployedAt); err != nil {
			return d, err
		}
		d.Document = new(D)
		if err := json.Unmarshal(body, d.Document); err != nil {
			return d, fmt.Errorf("%s %s version %d: decode document: %w", v.Kind, d.Key, d.Version, err)
		}
		return d, nil
	})
}

// List is LoadLatest with errors naming the kind ("list <kind>s: ..."), and
// no versions when the table does not exist yet.
func List[D any](ctx context.Context, q Querier, v Versions) ([]Version[D], error) {
	out, err := LoadLatest[D](ctx, q, v)
	if IsUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", v.Kind, err)
	}
	return out, nil
}
