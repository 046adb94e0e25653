package projection

// Trying a candidate document: its events applied in transactions that
// roll back, so an operator learns what a fix would do before deploying it.

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/event"
)

// DefaultTryBatch is how many events one rolled-back transaction of Try
// applies.
const DefaultTryBatch = 500

// Trial is what applying one event with a candidate document would do.
type Trial struct {
	// Result is the apply's outcome in the rolled-back transaction:
	// StatusApplied (it would apply), StatusDuplicate (applied already),
	// StatusSkipped (the candidate does not handle its type) or StatusFailed
	// (Err says why).
	Result
	// Later, when set, is the later event of the entity the projection has
	// applied (by sequence): a replay of this event would be refused as out
	// of order unless forced.
	Later *Later
}

// ErrTryCanceled wraps the context's error when Try stops before trying
// every event; the trials made so far are returned with it.
var ErrTryCanceled = errors.New("try stopped")

// Try applies evs, in order, to the projection of candidate as if
// candidate were deployed as its next version, each batch of
// DefaultTryBatch events in one transaction that is rolled back: nothing
// is written, no ledger row and no applied-sequence mark stays. candidate
// is validated as Deploy validates it (the same errors); each evaluation
// is bounded by the engine's cost limit and the whole by ctx. The trials
// are one per event, in input order.
func (e *Engine) Try(ctx context.Context, candidate *Document, evs []event.Envelope) ([]Trial, error) {
	if err := Validate(candidate, WithCostLimit(e.costLimit)); err != nil {
		return nil, err
	}
	deployed := e.Version(candidate.Name)
	c, err := compile(candidate, deployed+1, WithCostLimit(e.costLimit), runtimeOnly())
	if err != nil {
		return nil, err
	}
	out := make([]Trial, 0, len(evs))
	for start := 0; start < len(evs); start += DefaultTryBatch {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("%w after %d of %d events: %w", ErrTryCanceled, len(out), len(evs), err)
		}
		batch := evs[start:min(start+DefaultTryBatch, len(evs))]
		later, err := LaterMarks(ctx, e.pool, candidate.Name, batch)
		if err != nil {
			return out, err
		}
		res, err := e.run(ctx, batch, candidate.Name, ApplyOptions{candidate: c, rollBack: true})
		if err != nil && !errors.Is(err, errRolledBack) {
			return out, err
		}
		byIndex := make([]Result, len(batch))
		for _, r := range res {
			byIndex[r.Index] = r
		}
		for i, r := range byIndex {
			if r.Status == "" { // no pair: the event's type is not the candidate's
				r = Result{Projection: candidate.Name, IRVersion: c.version, Index: i, EventID: batch[i].EventID, Status: StatusSkipped}
			}
			r.Index += start
			out = append(out, Trial{Result: r, Later: later[i]})
		}
	}
	return out, nil
}

// errRolledBack ends a trial's transaction where a commit would be.
var errRolledBack = errors.New("rolled back")

// LaterMarks returns, per index of evs, the mark of its entity in
// projection when it is past the event's sequence: the later event a
// replay of it would be refused for (as the sequence guard), read in one
// query. Events without a sequence have none.
func LaterMarks(ctx context.Context, q querier, projection string, evs []event.Envelope) (map[int]*Later, error) {
	var idx []int
	var forks, ents []string
	var seqs []int64
	for i, ev := range evs {
		if ev.Sequence > 0 {
			idx = append(idx, i)
			forks, ents, seqs = append(forks, ev.ForkID), append(ents, ev.EntityID), append(seqs, ev.Sequence)
		}
	}
	out := map[int]*Later{}
	if len(idx) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT k.i, m.sequence, m.event_id
FROM unnest($2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS k(fork_id, entity_id, sequence, i)
JOIN causet_applied_sequences m ON m.projection = $1 AND m.fork_id = k.fork_id AND m.entity_id = k.entity_id AND m.sequence > k.sequence`,
		projection, forks, ents, seqs)
	if err != nil {
		return nil, fmt.Errorf("read applied sequences: %w", err)
	}
	var at int64
	var l Later
	_, err = pgx.ForEachRow(rows, []any{&at, &l.Sequence, &l.EventID}, func() error {
		found := l
		out[idx[at-1]] = &found // ORDINALITY counts from 1
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read applied sequences: %w", err)
	}
	return out, nil
}

// with is st with c as the newest version of its projection.
func (st *catalogState) with(c *compiled) *catalogState {
	out := &catalogState{version: st.version, byName: maps.Clone(st.byName), byEvent: st.byEvent, broken: maps.Clone(st.broken)}
	out.byName[c.doc.Name] = c
	delete(out.broken, c.doc.Name)
	return out
}
