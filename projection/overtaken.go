package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/event"
)

// Later is an event of the same entity, with a higher sequence, that a
// projection has applied.
type Later struct {
	EventID  string
	Sequence int64
}

// maxLaterChecked bounds the later events of an entity looked up in the
// dedupe ledger for one replay: the nearest ones, which are the likeliest to
// have been applied while the replayed event waited as a dead letter.
const maxLaterChecked = 100

// laterAppliedSQL finds, among the write path's later events of the entity
// (causet_events, by sequence), one the dedupe ledger holds for the
// projection.
const laterAppliedSQL = `SELECT e.event_id, e.sequence FROM (
	SELECT event_id, sequence FROM causet_events
	WHERE fork_id = $2 AND entity_id = $3 AND sequence > $4
	ORDER BY sequence LIMIT $5) e
WHERE EXISTS (SELECT 1 FROM causet_projection_applied a WHERE a.key = causet_applied_key($1, $2, e.event_id))
ORDER BY e.sequence DESC LIMIT 1`

// LaterApplied reports a later event of ev's entity that projection has
// already applied, or nil: a replay of ev would then apply an older event
// after a newer one. It needs ev's per-entity sequence and the write
// path's event ledger; without either it finds nothing.
func (e *Engine) LaterApplied(ctx context.Context, projection string, ev event.Envelope) (*Later, error) {
	if ev.Sequence <= 0 {
		return nil, nil
	}
	var exists bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass('causet_events') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for later events: %w", err)
	}
	if !exists {
		return nil, nil
	}
	var l Later
	err := e.pool.QueryRow(ctx, laterAppliedSQL, projection, ev.ForkID, ev.EntityID, ev.Sequence, maxLaterChecked).Scan(&l.EventID, &l.Sequence)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for later events: %w", err)
	}
	return &l, nil
}
