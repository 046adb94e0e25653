package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/event"
)

// The applied-sequence mark: the highest per-entity `sequence` each
// (projection, fork, entity) has applied, written in the apply transaction
// of every event that carries one, whoever produced it and whatever path
// (inline, retry, release, replay) applied it. A replay is checked against
// it (Later): a replayed event older than the mark would take the read
// model back. Events without a sequence neither move the mark nor are
// refused by it.

// markSQL raises the marks of a batch's keys: $1..$3 the keys, $4 the
// highest sequence the batch applied for each, $5 the event that carried
// it. A mark is never lowered, and a key already at or past the batch's is
// not rewritten.
const markSQL = `INSERT INTO causet_applied_sequences AS m (projection, fork_id, entity_id, sequence, event_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[])
ON CONFLICT (projection, fork_id, entity_id) DO UPDATE SET sequence = EXCLUDED.sequence, event_id = EXCLUDED.event_id
WHERE m.sequence < EXCLUDED.sequence`

type markKey struct{ projection, fork, entity string }

type mark struct {
	sequence int64
	eventID  string
}

// raiseMarks writes, in tx, the marks of the pairs the transaction applied.
func raiseMarks(ctx context.Context, tx pgx.Tx, pairs []*pair) error {
	var marks map[markKey]mark
	var order []markKey
	for _, p := range pairs {
		if p.res.Status != StatusApplied || p.ev.Sequence <= 0 {
			continue
		}
		if marks == nil {
			marks = map[markKey]mark{}
		}
		k := markKey{p.res.Projection, p.ev.ForkID, p.ev.EntityID}
		m, ok := marks[k]
		if !ok {
			order = append(order, k)
		}
		if p.ev.Sequence > m.sequence {
			marks[k] = mark{p.ev.Sequence, p.ev.EventID}
		}
	}
	if len(order) == 0 {
		return nil
	}
	// One order for every transaction, so two that raise the same marks
	// never wait on each other's row locks in a cycle.
	slices.SortFunc(order, func(a, b markKey) int {
		return cmp.Or(strings.Compare(a.projection, b.projection), strings.Compare(a.fork, b.fork), strings.Compare(a.entity, b.entity))
	})
	n := len(order)
	proj, fork, ent, seq, ids := make([]string, n), make([]string, n), make([]string, n), make([]int64, n), make([]string, n)
	for i, k := range order {
		proj[i], fork[i], ent[i] = k.projection, k.fork, k.entity
		seq[i], ids[i] = marks[k].sequence, marks[k].eventID
	}
	if _, err := tx.Exec(ctx, markSQL, proj, fork, ent, seq, ids); err != nil {
		return fmt.Errorf("record applied sequences: %w", err)
	}
	return nil
}

// Later is the event that carried the highest sequence of an entity a
// projection has applied.
type Later struct {
	EventID  string
	Sequence int64
}

// LaterApplied returns, read in q (a pool or the replay's own transaction),
// the mark of ev's entity for projection when it is past ev's sequence: a
// replay of ev would then apply an older event after a newer one. Nil for
// an event without a sequence or an entity whose mark is not past it.
func LaterApplied(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, projection string, ev event.Envelope) (*Later, error) {
	if ev.Sequence <= 0 {
		return nil, nil
	}
	var l Later
	err := q.QueryRow(ctx, `SELECT sequence, event_id FROM causet_applied_sequences
WHERE projection = $1 AND fork_id = $2 AND entity_id = $3 AND sequence > $4`,
		projection, ev.ForkID, ev.EntityID, ev.Sequence).Scan(&l.Sequence, &l.EventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the applied sequence of entity %s: %w", ev.EntityID, err)
	}
	return &l, nil
}
