package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/celexpr"
)

// Status is the outcome of one (projection, event) pair.
type Status string

const (
	// StatusApplied: the write and its ledger row were committed.
	StatusApplied Status = "applied"
	// StatusDuplicate: the ledger already held (projection, forkId, eventId);
	// nothing was written.
	StatusDuplicate Status = "duplicate"
	// StatusFailed: nothing was written; Result.Err says why.
	StatusFailed Status = "failed"
	// StatusSkipped (Apply only): the newest version of the projection does
	// not list the event type; nothing was written.
	StatusSkipped Status = "skipped"
	// StatusHeld (ApplyBatch with ApplyOptions.Hold): the caller asked to
	// hold the pair back; nothing was written and no ledger row was made.
	StatusHeld Status = "held"
)

// Result is the outcome of one (projection, event) pair.
type Result struct {
	Projection string
	IRVersion  int    // version used; 0 when the projection has none
	Index      int    // index of the event in the input slice
	EventID    string // the event's eventId
	Status     Status
	Err        *ApplyError // set when Status is StatusFailed
}

// ApplyOptions tunes Apply and ApplyBatch.
type ApplyOptions struct {
	// BeforeCommit, optional, runs in the apply transaction after every pair
	// has its status and before commit; results are the statuses as they
	// will be if the commit succeeds. An error rolls the transaction back.
	BeforeCommit func(ctx context.Context, tx pgx.Tx, results []Result) error
	// Hold, optional, is asked once per (projection, event) pair before
	// anything is evaluated; a pair for which it returns true is not applied,
	// gets StatusHeld and no ledger row. ev points into the slice given to
	// ApplyBatch. The ordering bridge holds the events of blocked entities.
	Hold func(projection string, ev *event.Envelope) bool
	// HoldAfterFailure holds, once a pair fails, every later pair of the
	// same (projection, fork, entity) in the batch: StatusHeld, no ledger
	// row. Entity ordering asks for it, so that an entity's later events are
	// never applied before its earlier one that failed.
	HoldAfterFailure bool
	// Guard is the sequence guard (guardSequences): a pair whose event is
	// older than its entity's applied sequence fails with SequenceRefused.
	// Every apply under entity ordering asks for it.
	Guard bool

	// candidate, set by Try, is applied as its projection's newest version;
	// rollBack ends the transaction with a rollback where it would commit.
	candidate *compiled
	rollBack  bool
}

// Engine applies events to projections with the newest deployed IR.
type Engine struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// costLimit bounds each evaluation of an expression.
	costLimit uint64

	mu    sync.RWMutex
	state *catalogState

	reloadMu sync.Mutex
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewEngine loads the deployed projections and
// starts a LISTEN connection that refreshes the cache on every deploy. Every
// apply also reads the one-row catalog counter, so a deploy that returned
// before an apply started is always used by it, even if a notification was
// missed. Close stops the listener; the pool stays open.
//
// Each evaluation of an expression may spend the cost limit (WithCostLimit,
// default DefaultCostLimit); one that goes past it fails its event as
// ir_eval. Documents are not rejected here for their cost estimate: Deploy
// checks that, and the limit bounds what was deployed before.
func NewEngine(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, opts ...Option) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("projection engine: pool is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{pool: pool, logger: logger, costLimit: celexpr.NewOptions(opts).CostLimit, state: &catalogState{version: -1}}
	if err := e.Refresh(ctx); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		// Every apply checks the catalog counter too: no periodic refresh.
		versions.Watch(lctx, pool, 0, e.Refresh, logger)
	}()
	return e, nil
}

// Close stops the listener. It does not close the pool.
func (e *Engine) Close() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

// Apply applies one event to one projection in one transaction with the
// newest deployed version of the projection.
//
// A failure of the pair itself (sql, ir_eval, invalid_event) is reported in
// the result (Status StatusFailed, Err set) with a nil error. A non-nil error
// (an *ApplyError, usually kind connection) means the attempt as a whole
// failed and nothing was committed; the result then carries the same error.
// A projection that is not deployed fails with kind ir_eval (ErrNotDeployed);
// one whose newest version does not list the event type gives StatusSkipped.
func (e *Engine) Apply(ctx context.Context, projection string, ev event.Envelope) (Result, error) {
	return e.ApplyWith(ctx, projection, ev, ApplyOptions{})
}

// ApplyWith is Apply with options.
func (e *Engine) ApplyWith(ctx context.Context, projection string, ev event.Envelope, opts ApplyOptions) (Result, error) {
	if projection == "" {
		ae := &ApplyError{Kind: contract.KindIREval, Err: fmt.Errorf("%w: empty projection name", ErrNotDeployed)}
		return Result{EventID: ev.EventID, Status: StatusFailed, Err: ae}, nil
	}
	res, err := e.run(ctx, []event.Envelope{ev}, projection, opts)
	if len(res) == 0 {
		if err == nil {
			err = errors.New("projection: no result")
		}
		ae := newApplyError(err)
		return Result{Projection: projection, EventID: ev.EventID, Status: StatusFailed, Err: ae}, ae
	}
	return res[0], err
}

// Deploy deploys doc (see the package-level Deploy) under the engine's cost
// limit and refreshes the cache.
func (e *Engine) Deploy(ctx context.Context, doc *Document) (int, error) {
	v, err := Deploy(ctx, e.pool, doc, WithCostLimit(e.costLimit))
	if err != nil {
		return 0, err
	}
	if err := e.Refresh(ctx); err != nil {
		e.logger.Warn("projection cache refresh after deploy failed", "error", err.Error())
	}
	return v, nil
}

// ApplyBatch applies every event to every projection whose newest version
// lists its type, in one transaction in which each (projection, event) pair is
// isolated: a failing pair is rolled back alone and the others commit.
//
// Results are one per pair, ordered by input index then projection name.
// Events that no projection lists produce no result. Duplicates within the
// batch or of earlier batches get StatusDuplicate.
//
// A nil error means the transaction committed (or had nothing to do) and the
// results are final. A non-nil error (an *ApplyError, usually kind
// connection) means nothing was committed: every result is then StatusFailed
// with that error, except events that are invalid, which keep their
// invalid_event error. At most one ApplyOptions may be given.
func (e *Engine) ApplyBatch(ctx context.Context, evs []event.Envelope, opts ...ApplyOptions) ([]Result, error) {
	return e.run(ctx, evs, "", firstOpts(opts))
}

func firstOpts(opts []ApplyOptions) ApplyOptions {
	if len(opts) > 0 {
		return opts[0]
	}
	return ApplyOptions{}
}
