package intents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/internal/catalog"
	"github.com/causet/projection-retry/internal/celexpr"
	"github.com/causet/projection-retry/internal/docparse"
)

// NotifyChannel is the LISTEN/NOTIFY channel Deploy notifies; the payload
// is "<intentType>:<version>".
const NotifyChannel = "causet_intent_handlers"

// deployLockBase names a deploy's advisory lock (catalog.LockClass and a
// hash of it with the intent type).
const deployLockBase = "intent-handler-deploy:"

// versions is the store of deployed handler versions.
var versions = catalog.Versions{
	Kind:    "intent handler",
	Table:   "causet_intent_handlers",
	Key:     "intent_type",
	Channel: NotifyChannel,
	Serialize: func(ctx context.Context, tx pgx.Tx, intentType string) error {
		_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", catalog.LockClass, deployLockBase+intentType)
		return err
	},
}

// Deploy validates doc and stores it as version N+1 of its intent type (N
// the newest deployed version, 0 if none).
// Concurrent deploys of one type are serialized. It notifies NotifyChannel,
// on which watching catalogs (Watch) refresh at once. opts are Validate's.
func Deploy(ctx context.Context, pool *pgxpool.Pool, doc *Document, opts ...Option) (int, error) {
	if err := Validate(doc, opts...); err != nil {
		return 0, err
	}
	return versions.Deploy(ctx, pool, doc.IntentType, doc)
}

// Deployment is the newest deployed version of an intent handler.
type Deployment struct {
	IntentType string
	Version    int
	DeployedAt time.Time
	Document   *Document
}

// List returns the newest deployed version of every intent type, ordered
// by type; an empty list when the schema does not exist yet.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Deployment, error) {
	vs, err := catalog.List[Document](ctx, pool, versions)
	if err != nil || vs == nil {
		return nil, err
	}
	out := make([]Deployment, len(vs))
	for i, v := range vs {
		out[i] = Deployment{IntentType: v.Key, Version: v.Version, DeployedAt: v.DeployedAt, Document: v.Document}
	}
	return out, nil
}

// Catalog holds the newest deployed version of every intent handler,
// compiled. It is refreshed on demand (Refresh, Lookup on a miss) and
// periodically by Watch.
type Catalog struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	opts   celexpr.Options

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
	o := celexpr.NewOptions(opts)
	o.RuntimeOnly = true
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

// Watch keeps the catalog current until ctx ends: it refreshes on each
// deploy notification and every interval, so a deploy is used at once, and
// within one interval even while notifications cannot arrive.
func (c *Catalog) Watch(ctx context.Context, interval time.Duration) {
	versions.Watch(ctx, c.pool, interval, c.Refresh, c.logger)
}

// IntentTypes lists the intent types with a compiled handler, sorted.
func (c *Catalog) IntentTypes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return docparse.SortedKeys(c.handlers)
}
