package starter

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// Status is the outcome of applying one (projection, event) pair.
type Status string

const (
	// StatusApplied means the effect was written.
	StatusApplied Status = "applied"
	// StatusDuplicate means the dedupe ledger already had the pair: nothing to do.
	StatusDuplicate Status = "duplicate"
	// StatusFailed means the attempt failed; see Outcome.ErrorKind.
	StatusFailed Status = "failed"
	// StatusHeld means BatchOptions.Hold held the pair back: nothing written.
	StatusHeld Status = "held"
)

// Outcome is the result of one (projection, event) pair of a batch.
type Outcome struct {
	// Projection is the projection's name.
	Projection string
	// IRVersion is the IR version the attempt used (0 when unknown).
	IRVersion int
	// Index is the event's index in the batch passed to ApplyBatch.
	Index int
	// Status says whether the pair was applied, a duplicate or failed.
	Status Status
	// ErrorKind classifies a failure: sql, ir_eval, connection or invalid_event.
	ErrorKind string
	// Err is the failure, nil unless Status is StatusFailed.
	Err error
}

// Engine is what the bridge needs of the projection engine: which
// projections list an event type, and attempt 1 of a batch in one
// transaction. [ProjectionEngine] adapts *projection.Engine to it.
type Engine interface {
	// Projections returns the projections whose source_events list eventType.
	Projections(eventType string) []string
	// ApplyBatch applies every matched (projection, event) pair of evs in
	// one transaction with per-pair isolation and reports each pair. An
	// error means the batch as a whole could not be attempted (e.g. the
	// database is unreachable); the bridge retries it and never treats it
	// as a failure of the events.
	ApplyBatch(ctx context.Context, evs []event.Envelope) ([]Outcome, error)
}

// BatchOptions tune ApplyBatchWith.
type BatchOptions struct {
	// Hold, optional: pairs for which it returns true are not applied and
	// get StatusHeld. ev points into the slice given to ApplyBatchWith.
	Hold func(projection string, ev *event.Envelope) bool
	// BeforeCommit, optional, runs in the batch's transaction with the
	// outcomes as they will be if the commit succeeds; an error rolls the
	// transaction back and is returned (wrapped) by ApplyBatchWith. tx is
	// nil for engines without a database transaction (test fakes).
	BeforeCommit func(ctx context.Context, tx pgx.Tx, outcomes []Outcome) error
}

// HoldingEngine is an Engine that can hold pairs back and run code in the
// batch's transaction; CAUSET_ORDERING=entity needs it.
type HoldingEngine interface {
	Engine
	ApplyBatchWith(ctx context.Context, evs []event.Envelope, opts BatchOptions) ([]Outcome, error)
}

// EngineFunc adapts functions to Engine (tests, benchmarks).
type EngineFunc struct {
	ProjectionsFunc func(eventType string) []string
	ApplyBatchFunc  func(ctx context.Context, evs []event.Envelope) ([]Outcome, error)
	// ApplyBatchWithFunc, optional, implements ApplyBatchWith; without it
	// ApplyBatchWith calls ApplyBatchFunc, then marks the held pairs held and
	// runs BeforeCommit with a nil tx (a fake has no transaction to undo).
	ApplyBatchWithFunc func(ctx context.Context, evs []event.Envelope, opts BatchOptions) ([]Outcome, error)
}

// ApplyBatchWith calls ApplyBatchWithFunc, or emulates it with ApplyBatchFunc.
func (f EngineFunc) ApplyBatchWith(ctx context.Context, evs []event.Envelope, opts BatchOptions) ([]Outcome, error) {
	if f.ApplyBatchWithFunc != nil {
		return f.ApplyBatchWithFunc(ctx, evs, opts)
	}
	out, err := f.ApplyBatchFunc(ctx, evs)
	if err != nil {
		return out, err
	}
	if opts.Hold != nil {
		for i := range out {
			if opts.Hold(out[i].Projection, &evs[out[i].Index]) {
				out[i].Status, out[i].ErrorKind, out[i].Err = StatusHeld, "", nil
			}
		}
	}
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(ctx, nil, out); err != nil {
			return out, fmt.Errorf("before commit: %w", err)
		}
	}
	return out, nil
}

// Projections calls ProjectionsFunc.
func (f EngineFunc) Projections(eventType string) []string { return f.ProjectionsFunc(eventType) }

// ApplyBatch calls ApplyBatchFunc.
func (f EngineFunc) ApplyBatch(ctx context.Context, evs []event.Envelope) ([]Outcome, error) {
	return f.ApplyBatchFunc(ctx, evs)
}

// errOutage marks a batch that could not be attempted because a dependency
// (the database) is unreachable.
var errOutage = errors.New("database unreachable")

// isOutage reports whether a batch result is an outage rather than failures
// of its events: the call failed as a whole, or any pair failed with a
// connection error (a lost connection fails the whole transaction, so the
// batch is retried as a whole; the dedupe ledger makes that safe).
func isOutage(outcomes []Outcome, err error) bool {
	if err != nil {
		return true
	}
	for _, o := range outcomes {
		if o.Status == StatusFailed && o.ErrorKind == string(contract.KindConnection) {
			return true
		}
	}
	return false
}

// ProjectionEngine adapts *projection.Engine to Engine.
func ProjectionEngine(e *projection.Engine) Engine { return projectionEngine{e} }

type projectionEngine struct{ e *projection.Engine }

func (p projectionEngine) Projections(eventType string) []string { return p.e.Projections(eventType) }

func (p projectionEngine) Refresh(ctx context.Context) error { return p.e.Refresh(ctx) }

func (p projectionEngine) ApplyBatch(ctx context.Context, evs []event.Envelope) ([]Outcome, error) {
	res, err := p.e.ApplyBatch(ctx, evs)
	return outcomes(res), err
}

func (p projectionEngine) ApplyBatchWith(ctx context.Context, evs []event.Envelope, opts BatchOptions) ([]Outcome, error) {
	po := projection.ApplyOptions{Hold: opts.Hold}
	if opts.BeforeCommit != nil {
		po.BeforeCommit = func(ctx context.Context, tx pgx.Tx, res []projection.Result) error {
			return opts.BeforeCommit(ctx, tx, outcomes(res))
		}
	}
	res, err := p.e.ApplyBatch(ctx, evs, po)
	return outcomes(res), err
}

func outcomes(res []projection.Result) []Outcome {
	out := make([]Outcome, len(res))
	for i, r := range res {
		o := Outcome{Projection: r.Projection, IRVersion: r.IRVersion, Index: r.Index}
		switch r.Status {
		case projection.StatusApplied:
			o.Status = StatusApplied
		case projection.StatusDuplicate:
			o.Status = StatusDuplicate
		case projection.StatusHeld:
			o.Status = StatusHeld
		default:
			o.Status = StatusFailed
			if r.Err != nil {
				o.ErrorKind, o.Err = string(r.Err.Kind), r.Err
			} else {
				o.ErrorKind, o.Err = string(contract.KindSQL), fmt.Errorf("projection %s: status %q", r.Projection, r.Status)
			}
		}
		out[i] = o
	}
	return out
}
