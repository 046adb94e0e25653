package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SetAsideEvent is a ledger event the relay set aside because Kafka refuses
// it for itself.
type SetAsideEvent struct {
	Position   int64     `json:"position"`
	EventID    string    `json:"eventId"`
	EventType  string    `json:"eventType"`
	EntityID   string    `json:"entityId"`
	ForkID     string    `json:"forkId"`
	Bytes      int       `json:"bytes"`
	Reason     string    `json:"reason"`
	SetAsideAt time.Time `json:"setAsideAt"`
}

// ListSetAside returns the events set aside, oldest first, at most limit.
func ListSetAside(ctx context.Context, pool *pgxpool.Pool, limit int) ([]SetAsideEvent, error) {
	rows, err := pool.Query(ctx, `SELECT s.position, s.event_id, e.event_type, e.entity_id, e.fork_id,
	octet_length(e.envelope::text), s.reason, s.set_aside_at
FROM causet_events_set_aside s JOIN causet_events e USING (position)
ORDER BY s.position LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("relay: list events set aside: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SetAsideEvent, error) {
		var e SetAsideEvent
		err := r.Scan(&e.Position, &e.EventID, &e.EventType, &e.EntityID, &e.ForkID, &e.Bytes, &e.Reason, &e.SetAsideAt)
		return e, err
	})
}

// RefusedRedrive is a set-aside event a redrive refused: its entity has
// published a later event since, which the bridges may have applied, so
// sending it now would take their read models back.
type RefusedRedrive struct {
	EventID       string `json:"eventId"`
	Sequence      int64  `json:"sequence"`
	LaterEventID  string `json:"laterEventId"`
	LaterSequence int64  `json:"laterSequence"`
}

func (r RefusedRedrive) Error() string {
	return fmt.Sprintf("redrive refused: %s (sequence %d) would be sent after %s (sequence %d) of its entity; "+
		"redrive it with --force to send it anyway, or leave it set aside", r.EventID, r.Sequence, r.LaterEventID, r.LaterSequence)
}

// Redrive puts set-aside events back in the outbox, so that the relay
// sends them again (all of them when eventIDs is empty), and returns how
// many, and those it refused. An event sent again comes after the later
// events of its entity that were published meanwhile: such an event is
// refused, as a replay is by the sequence guard, unless force.
func Redrive(ctx context.Context, pool *pgxpool.Pool, eventIDs []string, force bool) (int64, []RefusedRedrive, error) {
	var n int64
	var refused []RefusedRedrive
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT s.event_id, e.sequence, l.event_id, l.sequence
FROM causet_events_set_aside s JOIN causet_events e USING (position)
JOIN LATERAL (SELECT event_id, sequence FROM causet_events l
	WHERE l.fork_id = e.fork_id AND l.entity_id = e.entity_id AND l.sequence > e.sequence AND l.published_at IS NOT NULL
	ORDER BY l.sequence DESC LIMIT 1) l ON true
WHERE coalesce(cardinality($1::text[]), 0) = 0 OR s.event_id = ANY($1)
ORDER BY s.position
FOR UPDATE OF s`, eventIDs)
		if err != nil {
			return err
		}
		refused, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RefusedRedrive, error) {
			var rr RefusedRedrive
			return rr, r.Scan(&rr.EventID, &rr.Sequence, &rr.LaterEventID, &rr.LaterSequence)
		})
		if err != nil {
			return err
		}
		keep := []string{}
		if !force {
			for _, r := range refused {
				keep = append(keep, r.EventID)
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM causet_events_set_aside
WHERE (coalesce(cardinality($1::text[]), 0) = 0 OR event_id = ANY($1)) AND NOT event_id = ANY($2)`, eventIDs, keep)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("relay: redrive events set aside: %w", err)
	}
	if force {
		return n, nil, nil
	}
	return n, refused, nil
}
