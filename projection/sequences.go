package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/contract"
)

// The applied-sequence mark: the highest per-entity `sequence` each
// (projection, fork, entity) has applied, written in the apply transaction
// of every event that carries one, whoever produced it and whatever path
// (inline, retry, release, replay) applied it. The sequence guard checks
// against it: an event older than the mark would take the read model back. Events without a sequence neither move the mark nor are
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

// SequenceRefused is why the sequence guard refused a pair: its entity has
// applied a later sequence, so applying it would take the read model back.
// It is an invalid event (never retried); a forced replay is the only way
// past it.
type SequenceRefused struct {
	Projection, EntityID string
	Sequence             int64
	Later                Later
}

func (e *SequenceRefused) Error() string {
	return fmt.Sprintf("replay refused: %s already applied a later event of entity %s (sequence %d, eventId %s) than this one (sequence %d); "+
		"replay with {\"force\":true} to apply it anyway, or discard it",
		e.Projection, e.EntityID, e.Later.Sequence, e.Later.EventID, e.Sequence)
}

// guardSequences is the sequence guard, run in the apply transaction
// before any pair is written: every pair still to apply whose event carries
// a sequence below its entity's applied mark fails with SequenceRefused.
// Such a pair is still looked up in the dedupe ledger, so an event applied
// before (its later ones then applied after it) stays a duplicate. Every
// apply under entity ordering asks for it (ApplyOptions.Guard): fresh
// batches (an event read again after its entity moved on), releases, retry
// attempts, replays, rollout replays.
func guardSequences(ctx context.Context, tx pgx.Tx, pairs []*pair) error {
	var order []markKey
	seen := map[markKey]bool{}
	for _, p := range pairs {
		if p.done || p.ev.Sequence <= 0 {
			continue
		}
		k := markKey{p.res.Projection, p.ev.ForkID, p.ev.EntityID}
		if !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	if len(order) == 0 {
		return nil
	}
	n := len(order)
	proj, fork, ent := make([]string, n), make([]string, n), make([]string, n)
	for i, k := range order {
		proj[i], fork[i], ent[i] = k.projection, k.fork, k.entity
	}
	rows, err := tx.Query(ctx, `SELECT m.projection, m.fork_id, m.entity_id, m.sequence, m.event_id FROM causet_applied_sequences m
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(p, f, e) ON (m.projection, m.fork_id, m.entity_id) = (k.p, k.f, k.e)`, proj, fork, ent)
	if err != nil {
		return fmt.Errorf("read applied sequences: %w", err)
	}
	marks := map[markKey]Later{}
	var k markKey
	var l Later
	if _, err := pgx.ForEachRow(rows, []any{&k.projection, &k.fork, &k.entity, &l.Sequence, &l.EventID}, func() error {
		marks[k] = l
		return nil
	}); err != nil {
		return fmt.Errorf("read applied sequences: %w", err)
	}
	for _, p := range pairs {
		if p.done || p.ev.Sequence <= 0 {
			continue
		}
		m, ok := marks[markKey{p.res.Projection, p.ev.ForkID, p.ev.EntityID}]
		if !ok || m.Sequence <= p.ev.Sequence {
			continue
		}
		p.prefail = &ApplyError{Kind: contract.KindInvalidEvent, Err: &SequenceRefused{
			Projection: p.res.Projection, EntityID: p.ev.EntityID, Sequence: p.ev.Sequence, Later: m}}
	}
	return nil
}

// errSequenceRaced: while a guarded transaction applied events of an
// entity, another committed a later sequence of it; the transaction rolls
// back and runs again.
var errSequenceRaced = errors.New("a later event of the entity was applied meanwhile: the apply runs again")

// recheckSequences, after raiseMarks in a guarded transaction, fails with
// errSequenceRaced when an entity whose events the transaction applied has
// a mark past the highest sequence it applied: a concurrent apply of a
// later event committed after the guard's read.
func recheckSequences(ctx context.Context, tx pgx.Tx, pairs []*pair) error {
	applied := map[markKey]int64{}
	for _, p := range pairs {
		if p.res.Status != StatusApplied || p.ev.Sequence <= 0 {
			continue
		}
		k := markKey{p.res.Projection, p.ev.ForkID, p.ev.EntityID}
		applied[k] = max(applied[k], p.ev.Sequence)
	}
	if len(applied) == 0 {
		return nil
	}
	n := len(applied)
	proj, fork, ent, seq := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]int64, 0, n)
	for k, s := range applied {
		proj, fork, ent, seq = append(proj, k.projection), append(fork, k.fork), append(ent, k.entity), append(seq, s)
	}
	var raced bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM causet_applied_sequences m
JOIN unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS k(p, f, e, s) ON (m.projection, m.fork_id, m.entity_id) = (k.p, k.f, k.e)
WHERE m.sequence > k.s)`, proj, fork, ent, seq).Scan(&raced)
	if err != nil {
		return fmt.Errorf("read applied sequences: %w", err)
	}
	if raced {
		return errSequenceRaced
	}
	return nil
}
