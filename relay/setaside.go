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

// Redrive puts set-aside events back in the outbox, so that the relay
// sends them again (all of them when eventIDs is empty), and returns how
// many. An event sent again comes after the later events of its entity
// that were published meanwhile.
func Redrive(ctx context.Context, pool *pgxpool.Pool, eventIDs []string) (int64, error) {
	tag, err := pool.Exec(ctx, `DELETE FROM causet_events_set_aside WHERE coalesce(cardinality($1::text[]), 0) = 0 OR event_id = ANY($1)`, eventIDs)
	if err != nil {
		return 0, fmt.Errorf("relay: redrive events set aside: %w", err)
	}
	return tag.RowsAffected(), nil
}
