package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
)

// Key is one (projection, fork, entity): the unit entity ordering keeps in
// order.
type Key struct{ Projection, ForkID, EntityID string }

// KeyOf is the key of a (projection, event) pair.
func KeyOf(in contract.RetryInput) Key {
	return Key{Projection: in.Projection, ForkID: in.Event.ForkID, EntityID: in.Event.EntityID}
}

// HeadState is where a blocked key's head stands.
type HeadState string

const (
	// HeadActive: the head is retrying, or its incident holds. The key's
	// later events wait.
	HeadActive HeadState = "retrying"
	// HeadDeadLettered: the head's retry workflow dead-lettered it. Its later
	// events are released, unless dead letters hold their entity
	// (CAUSET_DLQ_HOLD_ENTITY).
	HeadDeadLettered HeadState = "dead_lettered"
	// HeadSettled: the head succeeded, was discarded or its window ended, or
	// its incident was resolved. The later events are released.
	HeadSettled HeadState = "settled"
	// HeadDeadLetterAll: the head's incident dead-lettered every event it
	// held. The parked events are dead-lettered, in order.
	HeadDeadLetterAll HeadState = "dead_letter_all"
	// HeadEnded: the head's retry run ended without an outcome (terminated,
	// timed out, gone) and the bridge is dead-lettering its event (EndHead).
	// The key waits; an attempt of the run still in flight is refused.
	HeadEnded HeadState = "ended"
)

// IsIncident reports whether head names an incident (else a retry workflow).
func IsIncident(head string) bool { return strings.HasPrefix(head, "projection-incident:") }

// Blocked is a blocked key of a partition.
type Blocked struct {
	Key
	// Head is the retry workflow ID or incident ID the key waits behind.
	Head  string
	State HeadState
	// Parked counts the key's parked events.
	Parked int64
	// Through is the highest offset of the key's events the partition has
	// taken (parked, or made its head): a redelivered event at or below it
	// was handled already. -1 when unknown.
	Through int64
	// PendingStart is the input of a head whose retry workflow may not have
	// been started yet (a release made it the head); nil once started.
	PendingStart *contract.RetryInput
	BlockedAt    time.Time
}

// Parked is one parked (projection, event): its retry input carries the
// event, record key, source and, for a failure, its attempt 1.
type Parked struct {
	Seq   int64
	Retry contract.RetryInput
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store is the PostgreSQL store of blocked keys and parked events
// (causet_blocked_keys, causet_parked_events); its package-level functions
// take the transaction of the batch or release that changes them.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool is the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

const blockedColumns = `projection, fork_id, entity_id, head_workflow_id, head_state, parked, through, pending_start, blocked_at`

func scanBlocked(r pgx.CollectableRow) (Blocked, error) {
	var b Blocked
	var pending []byte
	if err := r.Scan(&b.Projection, &b.ForkID, &b.EntityID, &b.Head, &b.State, &b.Parked, &b.Through, &pending, &b.BlockedAt); err != nil {
		return b, err
	}
	if len(pending) > 0 {
		b.PendingStart = new(contract.RetryInput)
		if err := json.Unmarshal(pending, b.PendingStart); err != nil {
			return b, fmt.Errorf("parking: decode the pending start of %v: %w", b.Key, err)
		}
	}
	return b, nil
}

// Load returns the blocked keys of a partition.
func (s *Store) Load(ctx context.Context, topic string, partition int32) ([]Blocked, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+blockedColumns+` FROM causet_blocked_keys WHERE topic = $1 AND partition = $2`, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("parking: load blocked keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanBlocked)
	if err != nil {
		return nil, fmt.Errorf("parking: load blocked keys: %w", err)
	}
	return out, nil
}

// Moved returns the blocked keys of the partitions whose head is in one of
// states (never HeadActive: those are not indexed).
func (s *Store) Moved(ctx context.Context, topic string, partitions []int32, states []HeadState) (map[int32][]Blocked, error) {
	ss := make([]string, len(states))
	for i, st := range states {
		ss[i] = string(st)
	}
	rows, err := s.pool.Query(ctx, `SELECT partition, `+blockedColumns+` FROM causet_blocked_keys
WHERE topic = $1 AND partition = ANY($2) AND head_state <> 'retrying' AND head_state = ANY($3)`, topic, partitions, ss)
	if err != nil {
		return nil, fmt.Errorf("parking: read settled heads: %w", err)
	}
	defer rows.Close()
	out := map[int32][]Blocked{}
	for rows.Next() {
		var p int32
		var b Blocked
		var pending []byte
		if err := rows.Scan(&p, &b.Projection, &b.ForkID, &b.EntityID, &b.Head, &b.State, &b.Parked, &b.Through, &pending, &b.BlockedAt); err != nil {
			return nil, fmt.Errorf("parking: read settled heads: %w", err)
		}
		out[p] = append(out[p], b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("parking: read settled heads: %w", err)
	}
	return out, nil
}

// Block records keys of a partition as blocked behind their heads, in tx:
// a key not blocked yet is inserted, a key blocked already takes the new
// head (its earlier one has settled) with its parked count kept and its
// Through raised to the one given. An
// incident head is read FOR SHARE, so an incident that stops holding
// meanwhile waits for tx and then moves these keys too (SetIncidentHeads);
// a key blocked behind an incident that no longer holds takes its state at
// once.
func Block(ctx context.Context, tx pgx.Tx, topic string, partition int32, keys []Blocked) error {
	if len(keys) == 0 {
		return nil
	}
	n := len(keys)
	proj, fork, ent, head := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	through := make([]int64, n)
	pending := make([]*string, n)
	var incidents []string
	for i, k := range keys {
		proj[i], fork[i], ent[i], head[i], through[i] = k.Projection, k.ForkID, k.EntityID, k.Head, k.Through
		if k.PendingStart != nil {
			b, err := json.Marshal(k.PendingStart)
			if err != nil {
				return err
			}
			s := string(b)
			pending[i] = &s
		}
		if IsIncident(k.Head) {
			incidents = append(incidents, k.Head)
		}
	}
	if len(incidents) > 0 {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM causet_incidents WHERE id = ANY($1) FOR SHARE`, incidents); err != nil {
			return fmt.Errorf("parking: lock the incidents of blocked keys: %w", err)
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO causet_blocked_keys AS b (topic, partition, projection, fork_id, entity_id, head_workflow_id, head_state, through, pending_start, head_input)
SELECT $1, $2, k.p, k.f, k.e, k.h, COALESCE((SELECT CASE i.state WHEN 'holding' THEN 'retrying' WHEN 'dead_lettering' THEN 'dead_letter_all' WHEN 'dead_lettered' THEN 'dead_letter_all' ELSE 'settled' END
	FROM causet_incidents i WHERE i.id = k.h), 'retrying'), k.t, k.s::jsonb, k.s::jsonb
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[]) AS k(p, f, e, h, t, s)
ON CONFLICT (topic, partition, projection, fork_id, entity_id) DO UPDATE
SET head_workflow_id = EXCLUDED.head_workflow_id, head_state = EXCLUDED.head_state, pending_start = EXCLUDED.pending_start,
	head_input = EXCLUDED.head_input, through = greatest(b.through, EXCLUDED.through), blocked_at = now()`,
		topic, partition, proj, fork, ent, head, through, pending)
	if err != nil {
		return fmt.Errorf("parking: record blocked keys: %w", err)
	}
	return nil
}

// Park records parked events of a partition in tx, in order, adds them to
// their keys' counts and raises their keys' Through to their offsets; it
// returns which of ins it inserted. An event
// parked before (its batch ran again after a restart) keeps its first row
// and place, and is not among them.
func Park(ctx context.Context, tx pgx.Tx, topic string, partition int32, ins []contract.RetryInput) ([]bool, error) {
	if len(ins) == 0 {
		return nil, nil
	}
	n := len(ins)
	proj, fork, ent, evid, retry := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, in := range ins {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		proj[i], fork[i], ent[i], evid[i], retry[i] = in.Projection, in.Event.ForkID, in.Event.EntityID, in.Event.EventID, string(b)
	}
	rows, err := tx.Query(ctx, `WITH ins AS (
	INSERT INTO causet_parked_events (topic, partition, projection, fork_id, entity_id, event_id, retry)
	SELECT $1, $2, p, f, e, g, h FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[]) WITH ORDINALITY AS x(p, f, e, g, h, n)
	ORDER BY n
	ON CONFLICT (projection, fork_id, event_id) DO NOTHING
	RETURNING projection, fork_id, entity_id, event_id, retry
), counted AS (
	UPDATE causet_blocked_keys k SET parked = k.parked + c.n, through = greatest(k.through, c.o)
	FROM (SELECT projection, fork_id, entity_id, count(*) AS n, max((retry->'source'->>'offset')::bigint) AS o FROM ins GROUP BY 1, 2, 3) c
	WHERE k.topic = $1 AND k.partition = $2 AND (k.projection, k.fork_id, k.entity_id) = (c.projection, c.fork_id, c.entity_id)
)
SELECT projection, fork_id, event_id FROM ins`, topic, partition, proj, fork, ent, evid, retry)
	if err != nil {
		return nil, fmt.Errorf("parking: park events: %w", err)
	}
	type pairID struct{ p, f, e string }
	inserted := map[pairID]bool{}
	for rows.Next() {
		var id pairID
		if err := rows.Scan(&id.p, &id.f, &id.e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("parking: park events: %w", err)
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("parking: park events: %w", err)
	}
	out := make([]bool, n)
	for i := range ins {
		out[i] = inserted[pairID{proj[i], fork[i], evid[i]}]
	}
	return out, nil
}

// ParkedOf returns, in parking order, up to limit parked events of keys in
// a partition.
func ParkedOf(ctx context.Context, q Querier, topic string, partition int32, keys []Key, limit int) ([]Parked, error) {
	proj, fork, ent := columns(keys)
	rows, err := q.Query(ctx, `SELECT p.seq, p.retry FROM causet_parked_events p
JOIN unnest($3::text[], $4::text[], $5::text[]) AS k(p, f, e) ON p.projection = k.p AND p.fork_id = k.f AND p.entity_id = k.e
WHERE p.topic = $1 AND p.partition = $2
ORDER BY p.seq LIMIT $6`, topic, partition, proj, fork, ent, limit)
	if err != nil {
		return nil, fmt.Errorf("parking: read parked events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Parked, error) {
		var p Parked
		var b []byte
		if err := r.Scan(&p.Seq, &b); err != nil {
			return p, err
		}
		return p, json.Unmarshal(b, &p.Retry)
	})
	if err != nil {
		return nil, fmt.Errorf("parking: read parked events: %w", err)
	}
	return out, nil
}

func columns(keys []Key) (proj, fork, ent []string) {
	n := len(keys)
	proj, fork, ent = make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		proj[i], fork[i], ent[i] = k.Projection, k.ForkID, k.EntityID
	}
	return proj, fork, ent
}

// Unpark deletes parked events of a partition by seq, in q, and takes them
// off their keys' counts.
func Unpark(ctx context.Context, q Querier, topic string, partition int32, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, `WITH del AS (
	DELETE FROM causet_parked_events WHERE topic = $1 AND partition = $2 AND seq = ANY($3)
	RETURNING projection, fork_id, entity_id
)
UPDATE causet_blocked_keys k SET parked = greatest(k.parked - c.n, 0)
FROM (SELECT projection, fork_id, entity_id, count(*) AS n FROM del GROUP BY 1, 2, 3) c
WHERE k.topic = $1 AND k.partition = $2 AND (k.projection, k.fork_id, k.entity_id) = (c.projection, c.fork_id, c.entity_id)`,
		topic, partition, seqs)
	if err != nil {
		return fmt.Errorf("parking: unpark events: %w", err)
	}
	return nil
}

// StillParked returns the keys of the parked events among seqs (of a
// partition) that are still parked.
func StillParked(ctx context.Context, q Querier, topic string, partition int32, seqs []int64) (map[Key]bool, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT projection, fork_id, entity_id FROM causet_parked_events
WHERE topic = $1 AND partition = $2 AND seq = ANY($3)`, topic, partition, seqs)
	if err != nil {
		return nil, fmt.Errorf("parking: read parked events: %w", err)
	}
	out := map[Key]bool{}
	var k Key
	if _, err := pgx.ForEachRow(rows, []any{&k.Projection, &k.ForkID, &k.EntityID}, func() error {
		out[k] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("parking: read parked events: %w", err)
	}
	return out, nil
}

// Unblock clears, in q, those of keys that have no parked event left and
// whose head is still head (a head that changed since was made by someone
// else's decision); it returns the keys it cleared.
func Unblock(ctx context.Context, q Querier, topic string, partition int32, keys []Blocked) ([]Key, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	n := len(keys)
	proj, fork, ent, head := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		proj[i], fork[i], ent[i], head[i] = k.Projection, k.ForkID, k.EntityID, k.Head
	}
	rows, err := q.Query(ctx, `DELETE FROM causet_blocked_keys b
USING unnest($3::text[], $4::text[], $5::text[], $6::text[]) AS k(p, f, e, h)
WHERE b.topic = $1 AND b.partition = $2 AND (b.projection, b.fork_id, b.entity_id, b.head_workflow_id) = (k.p, k.f, k.e, k.h)
AND NOT EXISTS (SELECT 1 FROM causet_parked_events p
	WHERE p.topic = $1 AND p.partition = $2 AND (p.projection, p.fork_id, p.entity_id) = (k.p, k.f, k.e))
RETURNING b.projection, b.fork_id, b.entity_id`, topic, partition, proj, fork, ent, head)
	if err != nil {
		return nil, fmt.Errorf("parking: unblock keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		return k, r.Scan(&k.Projection, &k.ForkID, &k.EntityID)
	})
	if err != nil {
		return nil, fmt.Errorf("parking: unblock keys: %w", err)
	}
	return out, nil
}

// Started clears the pending start of key's head once its retry workflow is
// durable, and says whether the head's run has published a dead letter
// before (a run this start found, not one it began: an event read again
// after its key was released). Its commit is not waited for
// (synchronous_commit off): a clear lost in a crash only makes the next
// owner start the head again, which finds the running workflow, and a
// burst of heads does not cost one WAL flush each.
func (s *Store) Started(ctx context.Context, topic string, partition int32, k Key, head string) (deadLetteredBefore bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit TO OFF`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH cleared AS (UPDATE causet_blocked_keys SET pending_start = NULL
WHERE topic = $1 AND partition = $2 AND projection = $3 AND fork_id = $4 AND entity_id = $5 AND head_workflow_id = $6)
SELECT EXISTS (SELECT 1 FROM causet_dead_letters WHERE workflow_id = $6)`,
			topic, partition, k.Projection, k.ForkID, k.EntityID, head).Scan(&deadLetteredBefore)
	})
	if err != nil {
		return false, fmt.Errorf("parking: record a started head: %w", err)
	}
	return deadLetteredBefore, nil
}

// HeadInput is the retry input of the head of key (the event it runs),
// kept from when it became the head until the key's row changes head; nil
// when the row has none (a head recorded by the previous release, an
// incident) or key is no longer blocked behind head.
func HeadInput(ctx context.Context, q Querier, topic string, partition int32, k Key, head string) (*contract.RetryInput, error) {
	var b []byte
	err := q.QueryRow(ctx, `SELECT head_input FROM causet_blocked_keys
WHERE topic = $1 AND partition = $2 AND projection = $3 AND fork_id = $4 AND entity_id = $5 AND head_workflow_id = $6`,
		topic, partition, k.Projection, k.ForkID, k.EntityID, head).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && len(b) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parking: read the head of %v: %w", k, err)
	}
	in := new(contract.RetryInput)
	if err := json.Unmarshal(b, in); err != nil {
		return nil, fmt.Errorf("parking: decode the head of %v: %w", k, err)
	}
	if in.WorkflowID() != head {
		// Written for an earlier head: a bridge of the previous release
		// moved the key to this one without it.
		return nil, nil
	}
	return in, nil
}

// EndHead records, in tx, that the retry run head ended without an
// outcome: its keys' state becomes ended (from retrying, or ended already
// when a bridge resumes), and the run is remembered in causet_ended_heads
// for a day (its later attempts are refused: RefuseEnded). When the head
// had moved on meanwhile (its run applied or dead-lettered the event) there
// is nothing to end: it returns false and the state the head is in ("" when
// no key waits behind it any more).
func EndHead(ctx context.Context, tx pgx.Tx, head string) (bool, HeadState, error) {
	tag, err := tx.Exec(ctx, `UPDATE causet_blocked_keys SET head_state = 'ended' WHERE head_workflow_id = $1 AND head_state IN ('retrying', 'ended')`, head)
	if err != nil {
		return false, "", fmt.Errorf("parking: end head %s: %w", head, err)
	}
	if tag.RowsAffected() == 0 {
		var st HeadState
		err := tx.QueryRow(ctx, `SELECT head_state FROM causet_blocked_keys WHERE head_workflow_id = $1 LIMIT 1`, head).Scan(&st)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false, "", fmt.Errorf("parking: read head %s: %w", head, err)
		}
		return false, st, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM causet_ended_heads WHERE ended_at < now() - interval '1 day'`); err != nil {
		return false, "", fmt.Errorf("parking: prune ended heads: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO causet_ended_heads (workflow_id) VALUES ($1)
ON CONFLICT (workflow_id) DO UPDATE SET ended_at = now()`, head); err != nil {
		return false, "", fmt.Errorf("parking: remember ended head %s: %w", head, err)
	}
	return true, HeadEnded, nil
}

// ErrHeadEnded refuses an attempt of a retry run the bridge found ended
// without an outcome and resolved (EndHead): its event is dead-lettered
// already, and its key's later events may have applied.
var ErrHeadEnded = errors.New("this retry run ended without an outcome and its event was dead-lettered by the bridge: the attempt is refused")

// RefuseEnded, in the transaction of an attempt of the retry run head,
// locks the run's blocked keys (so that EndHead waits for the attempt, or
// the attempt for it) and fails with ErrHeadEnded when the run was ended.
func RefuseEnded(ctx context.Context, tx pgx.Tx, head string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM causet_blocked_keys WHERE head_workflow_id = $1 FOR UPDATE`, head); err != nil {
		return fmt.Errorf("parking: lock the keys of head %s: %w", head, err)
	}
	var ended bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM causet_ended_heads WHERE workflow_id = $1)`, head).Scan(&ended); err != nil {
		return fmt.Errorf("parking: read whether head %s ended: %w", head, err)
	}
	if ended {
		return ErrHeadEnded
	}
	return nil
}

// SetHeadState records, in q, where the head of the keys blocked behind
// head stands; a head that settled earlier is never taken back. It
// returns how many events wait behind head.
func SetHeadState(ctx context.Context, q Querier, head string, state HeadState) (int64, error) {
	var waiting int64
	err := q.QueryRow(ctx, `WITH u AS (
	UPDATE causet_blocked_keys SET head_state = $2
	WHERE head_workflow_id = $1 AND head_state NOT IN ('settled', 'dead_letter_all')
	RETURNING parked
)
SELECT coalesce(sum(parked), 0)::bigint FROM u`, head, string(state)).Scan(&waiting)
	if err != nil {
		return 0, fmt.Errorf("parking: set the state of head %s: %w", head, err)
	}
	return waiting, nil
}

// Behind counts the events parked behind head.
func (s *Store) Behind(ctx context.Context, head string) (int64, error) {
	return Behind(ctx, s.pool, head)
}

// Behind counts, in q, the events parked behind head.
func Behind(ctx context.Context, q Querier, head string) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT coalesce(sum(parked), 0)::bigint FROM causet_blocked_keys WHERE head_workflow_id = $1`, head).Scan(&n); err != nil {
		return 0, fmt.Errorf("parking: count the events behind %s: %w", head, err)
	}
	return n, nil
}

// Oldest is when the oldest event parked in a partition was parked (zero
// when none is).
func (s *Store) Oldest(ctx context.Context, topic string, partition int32) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT parked_at FROM causet_parked_events WHERE topic = $1 AND partition = $2 ORDER BY seq LIMIT 1`,
		topic, partition).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("parking: read the oldest parked event: %w", err)
	}
	return at, nil
}

// Listed is a blocked key as `causet blocked` lists it.
type Listed struct {
	Topic     string
	Partition int32
	Blocked
}

// List returns up to limit blocked keys, those with the most parked events
// first, optionally of one projection.
func (s *Store) List(ctx context.Context, projection string, limit int) ([]Listed, error) {
	rows, err := s.pool.Query(ctx, `SELECT topic, partition, `+blockedColumns+` FROM causet_blocked_keys
WHERE $1 = '' OR projection = $1 ORDER BY parked DESC, blocked_at LIMIT $2`, projection, limit)
	if err != nil {
		return nil, fmt.Errorf("parking: list blocked keys: %w", err)
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		var l Listed
		var pending []byte
		if err := rows.Scan(&l.Topic, &l.Partition, &l.Projection, &l.ForkID, &l.EntityID, &l.Head, &l.State, &l.Parked, &l.Through, &pending, &l.BlockedAt); err != nil {
			return nil, fmt.Errorf("parking: list blocked keys: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("parking: list blocked keys: %w", err)
	}
	return out, nil
}

// deadLetterMemory is how long causet_dead_letters remembers a published
// dead letter: longer than a PublishDeadLetter is retried through an
// outage.
const deadLetterMemory = "7 days"

// PublishedDeadLetter returns where the dead letter of the run (workflowID,
// runID) for its replay replayCount was published, if RecordDeadLetter
// recorded it.
func (s *Store) PublishedDeadLetter(ctx context.Context, workflowID, runID string, replayCount int) (contract.DLQCoordinates, bool, error) {
	var at contract.DLQCoordinates
	err := s.pool.QueryRow(ctx, `SELECT topic, partition, "offset" FROM causet_dead_letters
WHERE workflow_id = $1 AND run_id = $2 AND replay_count = $3`, workflowID, runID, replayCount).Scan(&at.Topic, &at.Partition, &at.Offset)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return at, false, nil
	case err != nil:
		return at, false, fmt.Errorf("parking: read the dead letter of %s: %w", workflowID, err)
	}
	return at, true, nil
}

// RecordDeadLetter records where the dead letter of the run was published,
// and forgets those, and the claims, older than deadLetterMemory.
func (s *Store) RecordDeadLetter(ctx context.Context, workflowID, runID string, replayCount int, at contract.DLQCoordinates) error {
	if _, err := s.pool.Exec(ctx, `WITH old AS (DELETE FROM causet_dead_letters WHERE published_at < now() - interval '`+deadLetterMemory+`'),
old_claims AS (DELETE FROM causet_dead_letter_claims WHERE fenced_until < now() - interval '`+deadLetterMemory+`')
INSERT INTO causet_dead_letters (workflow_id, run_id, replay_count, topic, partition, "offset") VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING`, workflowID, runID, replayCount, at.Topic, at.Partition, at.Offset); err != nil {
		return fmt.Errorf("parking: record the dead letter of %s: %w", workflowID, err)
	}
	return nil
}

// DeadLetterClaim is the answer of ClaimDeadLetter.
type DeadLetterClaim struct {
	// Taken: the attempt holds the claim and may write the record.
	Taken bool
	// Earlier: an earlier attempt had claimed it (its window has passed),
	// so its record may be on the topic: look before writing.
	Earlier bool
	// Holder and Wait, when not Taken: the attempt that may still be
	// writing, and how long until its window has passed.
	Holder int
	Wait   time.Duration
}

// ClaimDeadLetter claims, for attempt, the writing of the dead letter of
// the run (workflowID, runID) at replayCount for window: no other attempt
// takes it until window has passed (on the database's clock), so that a
// record still in flight from one attempt has landed, or never will, before
// the next looks for it on the topic. A claim whose window has passed is
// taken over.
func (s *Store) ClaimDeadLetter(ctx context.Context, workflowID, runID string, replayCount, attempt int, window time.Duration) (DeadLetterClaim, error) {
	for range 2 {
		var fresh bool
		err := s.pool.QueryRow(ctx, `INSERT INTO causet_dead_letter_claims AS c (workflow_id, run_id, replay_count, attempt, fenced_until)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
ON CONFLICT (workflow_id, run_id, replay_count) DO UPDATE SET attempt = excluded.attempt, fenced_until = excluded.fenced_until
WHERE c.fenced_until <= now()
RETURNING xmax = 0`, workflowID, runID, replayCount, attempt, window.Seconds()).Scan(&fresh)
		if err == nil {
			return DeadLetterClaim{Taken: true, Earlier: !fresh}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return DeadLetterClaim{}, fmt.Errorf("parking: claim the dead letter of %s: %w", workflowID, err)
		}
		var c DeadLetterClaim
		var wait float64
		err = s.pool.QueryRow(ctx, `SELECT attempt, extract(epoch FROM fenced_until - now())::float8 FROM causet_dead_letter_claims
WHERE workflow_id = $1 AND run_id = $2 AND replay_count = $3`, workflowID, runID, replayCount).Scan(&c.Holder, &wait)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return DeadLetterClaim{}, fmt.Errorf("parking: read the claim on the dead letter of %s: %w", workflowID, err)
		}
		if err == nil && wait > 0 {
			c.Wait = time.Duration(wait * float64(time.Second))
			return c, nil
		}
		// The claim ended (or went) between the two statements: try again.
	}
	return DeadLetterClaim{}, fmt.Errorf("parking: claim the dead letter of %s: the claim keeps changing hands", workflowID)
}

// RenewDeadLetterClaim takes a whole window again on the claim attempt
// holds; false when it no longer holds it (its window passed).
func (s *Store) RenewDeadLetterClaim(ctx context.Context, workflowID, runID string, replayCount, attempt int, window time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE causet_dead_letter_claims SET fenced_until = now() + make_interval(secs => $5)
WHERE workflow_id = $1 AND run_id = $2 AND replay_count = $3 AND attempt = $4 AND fenced_until > now()`,
		workflowID, runID, replayCount, attempt, window.Seconds())
	if err != nil {
		return false, fmt.Errorf("parking: renew the claim on the dead letter of %s: %w", workflowID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ShortenDeadLetterClaim ends the claim attempt holds within d, if it
// would end later.
func (s *Store) ShortenDeadLetterClaim(ctx context.Context, workflowID, runID string, replayCount, attempt int, d time.Duration) error {
	if _, err := s.pool.Exec(ctx, `UPDATE causet_dead_letter_claims SET fenced_until = now() + make_interval(secs => $5)
WHERE workflow_id = $1 AND run_id = $2 AND replay_count = $3 AND attempt = $4 AND fenced_until > now() + make_interval(secs => $5)`,
		workflowID, runID, replayCount, attempt, d.Seconds()); err != nil {
		return fmt.Errorf("parking: shorten the claim on the dead letter of %s: %w", workflowID, err)
	}
	return nil
}
