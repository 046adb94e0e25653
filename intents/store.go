package intents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NotifyChannel is the LISTEN/NOTIFY channel Deploy notifies; the payload
// is "<intentType>:<version>".
const NotifyChannel = "causet_intent_handlers"

// Advisory locks are taken with two int4 keys, a space of their own that
// no single-bigint lock (the projection schema's, the relay's) can collide
// with. lockClass is "caus".
const (
	lockClass      int32 = 0x63617573
	schemaLockKey  int32 = 0x696e7473 // "ints"
	deployLockBase       = "intent-handler-deploy:"
)

const schemaSQL = `
CREATE TABLE IF NOT EXISTS causet_intent_handlers (
	intent_type text        NOT NULL,
	version     int         NOT NULL CHECK (version > 0),
	document    jsonb       NOT NULL,
	deployed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (intent_type, version)
);`

// EnsureSchema creates causet_intent_handlers if it does not exist. It is
// idempotent and safe to run concurrently.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", lockClass, schemaLockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schemaSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure intent handler schema: %w", err)
	}
	return nil
}

// Deploy validates doc and stores it as version N+1 of its intent type (N
// the newest deployed version, 0 if none), creating the schema if needed.
// Concurrent deploys of one type are serialized. Catalogs use the new
// version from their next Refresh. opts are Validate's.
func Deploy(ctx context.Context, pool *pgxpool.Pool, doc *Document, opts ...Option) (int, error) {
	if err := Validate(doc, opts...); err != nil {
		return 0, err
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return 0, fmt.Errorf("encode intent handler document: %w", err)
	}
	if err := EnsureSchema(ctx, pool); err != nil {
		return 0, err
	}
	var version int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", lockClass, deployLockBase+doc.IntentType); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx,
			"SELECT COALESCE(max(version), 0) + 1 FROM causet_intent_handlers WHERE intent_type = $1",
			doc.IntentType).Scan(&version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			"INSERT INTO causet_intent_handlers (intent_type, version, document) VALUES ($1, $2, $3)",
			doc.IntentType, version, string(body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, fmt.Sprintf("%s:%d", doc.IntentType, version))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deploy intent handler %s: %w", doc.IntentType, err)
	}
	return version, nil
}

// Deployment is the newest deployed version of an intent handler.
type Deployment struct {
	IntentType string
	Version    int
	DeployedAt time.Time
	Document   *Document
}

const latestSQL = `SELECT DISTINCT ON (intent_type) intent_type, version, document, deployed_at
FROM causet_intent_handlers ORDER BY intent_type, version DESC`

// List returns the newest deployed version of every intent type, ordered
// by type; an empty list when the schema does not exist yet.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Deployment, error) {
	rows, err := pool.Query(ctx, latestSQL)
	if err != nil {
		if isUndefinedTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list intent handlers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Deployment, error) {
		var d Deployment
		var body []byte
		if err := row.Scan(&d.IntentType, &d.Version, &body, &d.DeployedAt); err != nil {
			return d, err
		}
		d.Document = new(Document)
		if err := json.Unmarshal(body, d.Document); err != nil {
			return d, fmt.Errorf("intent handler %s version %d: decode document: %w", d.IntentType, d.Version, err)
		}
		return d, nil
	})
	if err != nil {
		if isUndefinedTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list intent handlers: %w", err)
	}
	return out, nil
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// Catalog holds the newest deployed version of every intent handler,
// compiled. It is refreshed on demand (Refresh, Lookup on a miss) and
// periodically by Watch.
type Catalog struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	opts   options

	mu       sync.RWMutex
	handlers map[string]*Handler
	broken   map[string]brokenHandler // deployed versions that do not compile

	refreshMu   sync.Mutex
	refreshedAt time.Time
}

type brokenHandler struct {
	version int
	err     error
}

// MissRefreshInterval is how often at most a Lookup of an unknown type
// reloads the catalog, so that a flood of unknown types costs one query a
// second, not one each.
const MissRefreshInterval = time.Second

// NewCatalog loads the deployed handlers. Evaluations are bounded by the
// cost limit of opts (WithCostLimit); deployed documents are not checked
// again against it, as Deploy did. A nil logger discards.
func NewCatalog(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, opts ...Option) (*Catalog, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o := newOptions(opts)
	o.runtimeOnly = true
	c := &Catalog{pool: pool, logger: logger, opts: o, handlers: map[string]*Handler{}, broken: map[string]brokenHandler{}}
	if err := c.Refresh(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Refresh reloads the newest deployed versions, compiling those that
// changed.
func (c *Catalog) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	return c.refreshLocked(ctx)
}

func (c *Catalog) refreshLocked(ctx context.Context) error {
	deps, err := List(ctx, c.pool)
	if err != nil {
		return err
	}
	c.mu.RLock()
	old, oldBroken := c.handlers, c.broken
	c.mu.RUnlock()
	handlers, broken := make(map[string]*Handler, len(deps)), map[string]brokenHandler{}
	for _, d := range deps {
		if h := old[d.IntentType]; h != nil && h.version == d.Version {
			handlers[d.IntentType] = h
			continue
		}
		if b, ok := oldBroken[d.IntentType]; ok && b.version == d.Version {
			broken[d.IntentType] = b
			continue
		}
		h, err := compile(d.Document, d.Version, c.opts)
		if err != nil {
			broken[d.IntentType] = brokenHandler{version: d.Version,
				err: fmt.Errorf("intent handler %s version %d does not compile: %w", d.IntentType, d.Version, err)}
			c.logger.Error("deployed intent handler does not compile", "intentType", d.IntentType, "handlerVersion", d.Version, "error", err.Error())
			continue
		}
		handlers[d.IntentType] = h
	}
	c.mu.Lock()
	c.handlers, c.broken, c.refreshedAt = handlers, broken, time.Now()
	c.mu.Unlock()
	return nil
}

// Lookup returns the handler of intentType. On a miss it reloads the
// catalog (at most once per MissRefreshInterval) and looks again; a type
// still unknown gives an error wrapping ErrUnknownIntentType, one whose
// deployed version does not compile an *EvalError.
func (c *Catalog) Lookup(ctx context.Context, intentType string) (*Handler, error) {
	h, err := c.cached(intentType)
	if !errors.Is(err, ErrUnknownIntentType) {
		return h, err
	}
	c.refreshMu.Lock()
	if time.Since(c.lastRefresh()) >= MissRefreshInterval {
		if rerr := c.refreshLocked(ctx); rerr != nil {
			c.logger.Warn("intent handler catalog refresh failed", "error", rerr.Error())
		}
	}
	c.refreshMu.Unlock()
	return c.cached(intentType)
}

func (c *Catalog) lastRefresh() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.refreshedAt
}

func (c *Catalog) cached(intentType string) (*Handler, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if h := c.handlers[intentType]; h != nil {
		return h, nil
	}
	if b, ok := c.broken[intentType]; ok {
		return nil, &EvalError{Path: "handler", Err: b.err}
	}
	return nil, unknownType(intentType)
}

// Decide decides in with the cached newest handler of its type. It never
// touches the database itself (r does), so it is safe inside a transaction
// that holds locks.
func (c *Catalog) Decide(ctx context.Context, in Intent, r Reader) (Decision, error) {
	h, err := c.cached(in.IntentType)
	if err != nil {
		return Decision{}, err
	}
	return h.Decide(ctx, in, r)
}

// Watch refreshes the catalog every interval until ctx ends, logging
// failures; a deploy is used within one interval.
func (c *Catalog) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
				c.logger.Warn("intent handler catalog refresh failed", "error", err.Error())
			}
		}
	}
}

// IntentTypes lists the intent types with a compiled handler, sorted.
func (c *Catalog) IntentTypes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sortedKeys(c.handlers)
}
