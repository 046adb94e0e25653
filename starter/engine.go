package starter

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// Engine is what the bridge needs of the projection engine: which
// projections list an event type, and attempt 1 of a batch in one
// transaction; *projection.Engine is one. ApplyBatch applies every matched
// (projection, event) pair of evs with per-pair isolation and reports each
// pair. An error means the batch as a whole could not be attempted (e.g. the
// database is unreachable); the bridge retries it and never treats it as a
// failure of the events. With CAUSET_ORDERING=entity the bridge passes
// ApplyOptions: Hold (pairs of blocked keys) and BeforeCommit (the blocks of
// the batch, in its transaction).
type Engine interface {
	Projections(eventType string) []string
	ApplyBatch(ctx context.Context, evs []event.Envelope, opts ...projection.ApplyOptions) ([]projection.Result, error)
}

// EngineFunc adapts functions to Engine (tests, benchmarks).
type EngineFunc struct {
	ProjectionsFunc func(eventType string) []string
	ApplyBatchFunc  func(ctx context.Context, evs []event.Envelope) ([]projection.Result, error)
	// ApplyBatchWithFunc, optional, answers calls with ApplyOptions; without
	// it ApplyBatch calls ApplyBatchFunc, then marks the held pairs held and
	// runs BeforeCommit in a transaction of Pool (committed unless
	// BeforeCommit fails), as the engine's own transaction would.
	ApplyBatchWithFunc func(ctx context.Context, evs []event.Envelope, opts projection.ApplyOptions) ([]projection.Result, error)
	// Pool is where BeforeCommit's transaction runs; required with entity
	// ordering, whose blocks and parked events are written there.
	Pool *pgxpool.Pool
}

// Projections calls ProjectionsFunc.
func (f EngineFunc) Projections(eventType string) []string { return f.ProjectionsFunc(eventType) }

// ApplyBatch calls ApplyBatchFunc, or ApplyBatchWithFunc (or an emulation
// of it) when given options.
func (f EngineFunc) ApplyBatch(ctx context.Context, evs []event.Envelope, opts ...projection.ApplyOptions) ([]projection.Result, error) {
	if len(opts) == 0 {
		return f.ApplyBatchFunc(ctx, evs)
	}
	if f.ApplyBatchWithFunc != nil {
		return f.ApplyBatchWithFunc(ctx, evs, opts[0])
	}
	out, err := f.ApplyBatchFunc(ctx, evs)
	if err != nil {
		return out, err
	}
	if hold := opts[0].Hold; hold != nil {
		for i := range out {
			if hold(out[i].Projection, &evs[out[i].Index]) {
				out[i].Status, out[i].Err = projection.StatusHeld, nil
			}
		}
	}
	if bc := opts[0].BeforeCommit; bc != nil {
		if f.Pool == nil {
			return out, errors.New("EngineFunc.Pool is required with ApplyOptions.BeforeCommit")
		}
		if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error { return bc(ctx, tx, out) }); err != nil {
			return out, fmt.Errorf("before commit: %w", err)
		}
	}
	return out, nil
}

// kindOf is a failed pair's error kind (sql when the engine gave none).
func kindOf(r projection.Result) string {
	if r.Err == nil {
		return string(contract.KindSQL)
	}
	return string(r.Err.Kind)
}

// errOf is a failed pair's error, nil when it has none.
func errOf(r projection.Result) error {
	if r.Err == nil {
		return nil
	}
	return r.Err
}

// isOutage reports whether a batch result is an outage rather than failures
// of its events: the call failed as a whole, or any pair failed with a
// connection error (a lost connection fails the whole transaction, so the
// batch is retried as a whole; the dedupe ledger makes that safe).
func isOutage(results []projection.Result, err error) bool {
	if err != nil {
		return true
	}
	for _, r := range results {
		if r.Status == projection.StatusFailed && kindOf(r) == string(contract.KindConnection) {
			return true
		}
	}
	return false
}
