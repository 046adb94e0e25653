package incident

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/parking"
)

// Store keeps incidents in PostgreSQL (causet_incidents): under policy hold
// the row is what the bridges and the incident workflow share; the events
// it holds are parked behind it as their keys' head (package parking).
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool is the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Row is an incident as the bridges see it.
type Row struct {
	ID       string
	State    contract.IncidentState
	Input    contract.IncidentInput
	OpenedAt time.Time
	// EventsAffected and EventsHeld are the hold's counts as its reports
	// recorded them (AddCounts): a restarted run goes on from them.
	EventsAffected, EventsHeld int
}

// Open records a holding incident in tx; it reports whether the row now
// holds. A row still releasing or dead-lettering an earlier hold is left
// alone (false: its events take the normal path meanwhile): its run drains
// exactly that hold's events, then moves the row on. A row that ended
// (resolved, dead_lettered) reopens as a new hold: opened now, its counts
// from zero, a new run. A row that holds already keeps its input, opening
// time (so the hold's deadline) and counts.
func (s *Store) Open(ctx context.Context, tx pgx.Tx, in contract.IncidentInput) (bool, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return false, err
	}
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)
	tag, err := tx.Exec(ctx, `INSERT INTO causet_incidents (id, projection, fingerprint, state, input)
VALUES ($1, $2, $3, 'holding', $4)
ON CONFLICT (id) DO UPDATE SET state = 'holding', updated_at = now(),
	input = CASE WHEN causet_incidents.state = 'holding' THEN causet_incidents.input ELSE EXCLUDED.input END,
	opened_at = CASE WHEN causet_incidents.state = 'holding' THEN causet_incidents.opened_at ELSE now() END,
	events_affected = CASE WHEN causet_incidents.state = 'holding' THEN causet_incidents.events_affected ELSE 0 END,
	events_held = CASE WHEN causet_incidents.state = 'holding' THEN causet_incidents.events_held ELSE 0 END
WHERE causet_incidents.state IN ('resolved', 'dead_lettered', 'holding')`, id, in.Projection, in.Fingerprint, b)
	if err != nil {
		return false, fmt.Errorf("incident: open %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Active lists the incidents that hold or release events.
func (s *Store) Active(ctx context.Context) ([]Row, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, state, input, opened_at, events_affected, events_held FROM causet_incidents
WHERE state IN ('holding', 'releasing', 'dead_lettering')`)
	if err != nil {
		return nil, fmt.Errorf("incident: list active incidents: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		var in []byte
		if err := r.Scan(&x.ID, &x.State, &in, &x.OpenedAt, &x.EventsAffected, &x.EventsHeld); err != nil {
			return x, err
		}
		return x, json.Unmarshal(in, &x.Input)
	})
}

// AddCounts adds a report's counts to holding incident id's row, where a
// restarted run finds them.
func (s *Store) AddCounts(ctx context.Context, id string, affected, held int) error {
	if _, err := s.pool.Exec(ctx, `UPDATE causet_incidents SET events_affected = events_affected + $2, events_held = events_held + $3
WHERE id = $1 AND state = 'holding'`, id, affected, held); err != nil {
		return fmt.Errorf("incident: count the events of %s: %w", id, err)
	}
	return nil
}

// Get returns incident id's row; found is false when it has none.
func (s *Store) Get(ctx context.Context, id string) (row Row, found bool, err error) {
	var in []byte
	err = s.pool.QueryRow(ctx, `SELECT id, state, input, opened_at, events_affected, events_held FROM causet_incidents WHERE id = $1`, id).
		Scan(&row.ID, &row.State, &in, &row.OpenedAt, &row.EventsAffected, &row.EventsHeld)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Row{}, false, nil
	case err != nil:
		return Row{}, false, fmt.Errorf("incident: read %s: %w", id, err)
	}
	return row, true, json.Unmarshal(in, &row.Input)
}

// RestartInput is the input of a new run of the row's incident, whose
// workflow ended while the row still holds (releases, dead-letters) its
// events: it carries the row's state, the time it opened (so the hold's
// deadline stands) and its counts, and a releasing or dead-lettering row
// is marked decided, so that the run finishes that rather than probe.
func (r Row) RestartInput(now time.Time) contract.IncidentInput {
	in := r.Input
	st := contract.IncidentStatus{
		State: r.State, Projection: in.Projection, Fingerprint: in.Fingerprint, Policy: in.Policy,
		ErrorKind: in.ErrorKind, SQLState: in.SQLState, Error: in.Error, Pattern: in.Pattern,
		FirstSeen: r.OpenedAt.UTC(), LastSeen: r.OpenedAt.UTC(),
		EventsAffected: r.EventsAffected, EventsHeld: r.EventsHeld,
	}
	switch r.State {
	case contract.IncidentReleasing:
		at := now.UTC()
		st.ResolvedAt, st.ResolvedBy = &at, "restarted"
		st.Reason = "its workflow ended while the release was under way; a new run finishes it"
	case contract.IncidentDeadLettering:
		at := now.UTC()
		st.ResolvedAt, st.ResolvedBy = &at, "restarted"
		st.Reason = "its workflow ended while the held events were being dead-lettered; a new run finishes it"
	}
	in.Status = &st
	return in
}

// HoldingFor returns the incident holding projection's failures of kind
// whose error has the pattern of errText ("" when none): a retry run whose
// schedule ran out with such a failure joins the hold. Runs keep only the
// error's text, so it is matched by pattern and kind (SQLSTATE, which the
// text implies, aside).
func (s *Store) HoldingFor(ctx context.Context, projection, kind, errText string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT id FROM causet_incidents
WHERE projection = $1 AND state = 'holding' AND input->>'errorKind' = $2 AND input->>'pattern' = $3
ORDER BY opened_at LIMIT 1`, projection, kind, Pattern(errText)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("incident: find the hold of %s: %w", projection, err)
	}
	return id, nil
}

// States returns the state of each incident of ids that has a row.
func (s *Store) States(ctx context.Context, ids []string) (map[string]contract.IncidentState, error) {
	out := make(map[string]contract.IncidentState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, state FROM causet_incidents WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("incident: read incident states: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st contract.IncidentState
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// SetState moves incident id to state to if it is in one of from; it
// reports whether it did. An incident without a row (policy dead-letter)
// is left alone. In the same transaction the keys blocked behind it
// (package parking) take the matching head state: releasing or resolved
// lets their parked events go, dead_lettered dead-letters them. The
// incident's row is updated first, so a bridge that blocks a key behind
// the incident meanwhile (reading the row FOR SHARE) is waited for and its
// key moved too.
func (s *Store) SetState(ctx context.Context, id string, to contract.IncidentState, from ...contract.IncidentState) (bool, error) {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	var moved bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE causet_incidents SET state = $2, updated_at = now() WHERE id = $1 AND state = ANY($3)`, id, to, fs)
		if err != nil {
			return err
		}
		moved = tag.RowsAffected() == 1
		head := parking.HeadSettled
		switch {
		case !moved || to == contract.IncidentHolding:
			return nil
		case to == contract.IncidentDeadLettering, to == contract.IncidentDeadLettered:
			head = parking.HeadDeadLetterAll
		}
		_, err = parking.SetHeadState(ctx, tx, id, head)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("incident: set %s %s: %w", id, to, err)
	}
	return moved, nil
}
