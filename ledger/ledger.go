package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/intents"
)

// Response statuses (the 200 bodies) and recorded statuses (the status
// column and GET /v1/intents/{id}).
const (
	StatusSuccess  = "SUCCESS"
	StatusRejected = "REJECTED"

	RecordedSucceeded = "succeeded"
	RecordedRejected  = "rejected"
	RecordedUnknown   = "unknown"
)

// Retry defaults (see the package documentation).
const (
	DefaultTries      = 3
	DefaultTryTimeout = 5 * time.Second
)

// DefaultWaits are the waits between tries: 100 ms, then 1 s.
var DefaultWaits = []time.Duration{100 * time.Millisecond, time.Second}

// Decider decides an intent, reading rows with r inside the ledger's
// transaction; *intents.Catalog is one.
type Decider interface {
	Decide(ctx context.Context, in intents.Intent, r intents.Reader) (intents.Decision, error)
}

// Ledger records intents and their events.
type Ledger struct {
	pool       *pgxpool.Pool
	decider    Decider
	logger     *slog.Logger
	tries      int
	waits      []time.Duration
	tryTimeout time.Duration
}

// Option adjusts New.
type Option func(*Ledger)

// WithRetry sets how often connection acquisition and BEGIN are tried (at
// least 1), the waits between tries (the last repeats) and the bound of
// each try.
func WithRetry(tries int, waits []time.Duration, tryTimeout time.Duration) Option {
	return func(l *Ledger) {
		l.tries, l.tryTimeout = max(tries, 1), tryTimeout
		if len(waits) > 0 {
			l.waits = waits
		}
	}
}

// WithLogger logs retries (WARN); without it they are discarded.
func WithLogger(logger *slog.Logger) Option { return func(l *Ledger) { l.logger = logger } }

// New returns a ledger on pool that decides intents with decider. The
// schema must be migrated (package schema).
func New(pool *pgxpool.Pool, decider Decider, opts ...Option) *Ledger {
	l := &Ledger{pool: pool, decider: decider, logger: slog.New(slog.DiscardHandler),
		tries: DefaultTries, waits: DefaultWaits, tryTimeout: DefaultTryTimeout}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Outcome is a recorded intent.
type Outcome struct {
	IntentID string
	// Status is StatusSuccess or StatusRejected.
	Status string
	// Body is the exact 200 response body, as recorded: a re-submission
	// gets the same bytes.
	Body []byte
	// Replayed is set when the intent had been recorded before; nothing
	// was written.
	Replayed       bool
	HandlerVersion int
	Rule, Reason   string
	Events         []event.Envelope
}

// successBody and rejectedBody are the 200 bodies of the HTTP API.
type successBody struct {
	Status   string            `json:"status"`
	IntentID string            `json:"intentId"`
	Events   []json.RawMessage `json:"events"`
}

type rejectedBody struct {
	Status   string `json:"status"`
	IntentID string `json:"intentId"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason"`
}

// Submit records in in one transaction (see the package documentation):
// its recorded outcome if it was recorded before, else the handler's
// decision with its events.
func (l *Ledger) Submit(ctx context.Context, in intents.Intent) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	st, err := attempt(ctx, l, "begin", func(tctx context.Context) (*started, error) { return l.begin(tctx, in) })
	if err != nil {
		return Outcome{}, err
	}
	defer func() {
		if !st.committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = st.conn.Exec(rctx, "ROLLBACK")
		}
		// A connection left in a transaction is closed by the pool, not reused.
		st.conn.Release()
	}()
	return l.submit(ctx, st, in)
}

// started is an intent's open transaction: its connection, the
// transaction's now() and the intent's recorded row, if any.
type started struct {
	conn      *pgxpool.Conn
	now       time.Time
	locked    bool // the intent ID's lock was free
	rec       recordedRow
	found     bool
	committed bool
}

// begin acquires a connection and, in one round trip, begins the
// transaction, takes the intent ID's lock and looks the intent up. The
// lookup is a later statement than the lock, so its snapshot follows it.
// Nothing is written yet, so a failed begin may be tried again.
func (l *Ledger) begin(ctx context.Context, in intents.Intent) (*started, error) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	st := &started{conn: conn, found: true}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(LockSQL, IntentLockClass, in.IntentID).QueryRow(func(row pgx.Row) error { return row.Scan(&st.locked, &st.now) })
	b.Queue(LookupSQL, in.IntentID).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&st.rec.status, &st.rec.rule, &st.rec.reason, &st.rec.version, &st.rec.body, &st.rec.hash)
		if errors.Is(err, pgx.ErrNoRows) {
			st.found = false
			return nil
		}
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		conn.Release()
		return nil, err
	}
	return st, nil
}

// The ledger's statements, exported so that measurements (causet bench's
// direct-insert ceiling) issue exactly these.
const (
	// LockSQL takes one intent ID's lock if it is free: a second request
	// while the first is recorded is told so (ErrInProgress) rather than
	// queued. Its lookup must be a later statement: a statement's snapshot
	// predates the lock it takes.
	LockSQL   = "SELECT pg_try_advisory_xact_lock($1, hashtext($2)), now()"
	LookupSQL = `SELECT status, COALESCE(rule, ''), COALESCE(reason, ''), handler_version, response::text, request_hash
FROM causet_intents WHERE intent_id = $1`
	// IntentSQL records an intent without events: a rejected one, or an
	// accepted one whose handler emitted none.
	IntentSQL = `INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, rule, reason, handler_version, response, request_hash)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), $8, $9, $10) RETURNING response::text`
	// RecordSQL records an accepted intent with its $5 events in one
	// statement: it takes the entity's next $5 sequence numbers (the
	// upsert's row lock serializes the writers of one (fork, entity) until
	// commit), inserts the events with their numbers written into their
	// envelopes ($7, each with a placeholder sequence), and inserts the
	// intent row whose response is the SUCCESS body with those envelopes. It
	// returns the response as stored and the entity's last sequence number.
	RecordSQL = `WITH seq AS (
	INSERT INTO causet_entity_sequences AS s (fork_id, entity_id, last_sequence) VALUES ($4, $3, $5)
	ON CONFLICT (fork_id, entity_id) DO UPDATE SET last_sequence = s.last_sequence + EXCLUDED.last_sequence
	RETURNING last_sequence
), ev AS (
	INSERT INTO causet_events (event_id, fork_id, entity_id, sequence, event_type, intent_id, envelope)
	SELECT e.id, $4, $3, seq.last_sequence - $5 + e.n, e.typ, $1,
		jsonb_set(e.env::jsonb, '{sequence}', to_jsonb(seq.last_sequence - $5 + e.n))
	FROM seq, unnest($6::text[], $7::text[], $8::text[]) WITH ORDINALITY AS e(id, typ, env, n)
	RETURNING sequence, envelope
)
INSERT INTO causet_intents (intent_id, intent_type, entity_id, fork_id, status, handler_version, response, request_hash)
SELECT $1, $2, $3, $4, 'succeeded', $9,
	jsonb_build_object('status', 'SUCCESS', 'intentId', $1::text, 'events', (SELECT jsonb_agg(envelope ORDER BY sequence) FROM ev)), $10
RETURNING response::text, (SELECT last_sequence FROM seq)`
)

func (l *Ledger) submit(ctx context.Context, st *started, in intents.Intent) (Outcome, error) {
	if !st.locked {
		return Outcome{}, ErrInProgress
	}
	hash, err := RequestHash(in)
	if err != nil {
		return Outcome{}, err
	}
	if st.found {
		if st.rec.hash != nil && !bytes.Equal(st.rec.hash, hash) {
			return Outcome{}, &ReusedError{IntentID: in.IntentID}
		}
		return st.rec.outcome(in.IntentID)
	}
	d, err := l.decider.Decide(ctx, in, intents.NewReader(st.conn))
	if err != nil {
		return Outcome{}, decideError(err)
	}
	if d.Rejected() {
		body, err := json.Marshal(rejectedBody{Status: StatusRejected, IntentID: in.IntentID, Rule: d.Rule, Reason: d.Reason})
		if err != nil {
			return Outcome{}, fmt.Errorf("encode response: %w", err)
		}
		out := Outcome{IntentID: in.IntentID, Status: StatusRejected, HandlerVersion: d.HandlerVersion, Rule: d.Rule, Reason: d.Reason}
		return out, recordIntent(ctx, st, in, RecordedRejected, &out, body, hash)
	}
	envs, err := envelopes(in, d, st.now)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{IntentID: in.IntentID, Status: StatusSuccess, HandlerVersion: d.HandlerVersion, Events: envs}
	n := int64(len(envs))
	if n == 0 {
		body, err := json.Marshal(successBody{Status: StatusSuccess, IntentID: in.IntentID, Events: []json.RawMessage{}})
		if err != nil {
			return Outcome{}, fmt.Errorf("encode response: %w", err)
		}
		return out, recordIntent(ctx, st, in, RecordedSucceeded, &out, body, hash)
	}
	ids, types, texts := make([]string, n), make([]string, n), make([]string, n)
	for i := range envs {
		raw, err := json.Marshal(envs[i])
		if err != nil {
			return Outcome{}, fmt.Errorf("encode event: %w", err)
		}
		ids[i], types[i], texts[i] = envs[i].EventID, envs[i].EventType, string(raw)
	}
	var stored string
	var last int64
	b := &pgx.Batch{}
	b.Queue(RecordSQL, in.IntentID, in.IntentType, in.EntityID, in.ForkID, n, ids, types, texts, d.HandlerVersion, hash).
		QueryRow(func(row pgx.Row) error { return row.Scan(&stored, &last) })
	if err := commit(ctx, st, b, in.IntentID); err != nil {
		return Outcome{}, err
	}
	for i := range envs {
		envs[i].Sequence = last - n + int64(i) + 1
	}
	out.Body = []byte(stored)
	return out, nil
}

// envelopes builds the events of an accepted intent, without their
// sequence numbers, and checks each is an envelope event.Decode accepts in
// the form the ledger stores and the relay publishes.
func envelopes(in intents.Intent, d intents.Decision, now time.Time) ([]event.Envelope, error) {
	envs := make([]event.Envelope, len(d.Events))
	for i, e := range d.Events {
		id := in.IntentID + ":" + strconv.Itoa(i+1)
		if len(id) > event.MaxEventIDBytes {
			return nil, &intents.InvalidError{Reason: fmt.Sprintf(
				"intentId is %d bytes: the ID of its event %d (<intentId>:%d) would be %d bytes, more than the %d allowed",
				len(in.IntentID), i+1, i+1, len(id), event.MaxEventIDBytes)}
		}
		// The payload as the ledger's jsonb will render it, so that the
		// checks below see what the relay publishes and the bridge decodes.
		payload, err := event.PlainNumbers(e.Payload)
		if err != nil {
			return nil, &intents.EvalError{Path: fmt.Sprintf("emits[%d]", i), Err: fmt.Errorf("not a valid event: %w", err)}
		}
		envs[i] = event.Envelope{EventID: id, EventType: e.EventType, EntityID: in.EntityID, ForkID: in.ForkID,
			IntentID: in.IntentID, Sequence: 1, OccurredAt: now.UTC(), Payload: payload}
		raw, err := json.Marshal(envs[i])
		if err == nil {
			_, err = event.Decode(raw)
		}
		if err != nil {
			return nil, &intents.EvalError{Path: fmt.Sprintf("emits[%d]", i), Err: fmt.Errorf("not a valid event: %w", err)}
		}
	}
	return envs, nil
}

// recordIntent inserts and commits the intent row of an intent without
// events; out.Body becomes the response as stored (jsonb's rendering),
// which is what every later answer replays.
func recordIntent(ctx context.Context, st *started, in intents.Intent, status string, out *Outcome, body, hash []byte) error {
	var stored string
	b := &pgx.Batch{}
	b.Queue(IntentSQL, in.IntentID, in.IntentType, in.EntityID, in.ForkID, status,
		out.Rule, out.Reason, out.HandlerVersion, string(body), hash).QueryRow(func(row pgx.Row) error { return row.Scan(&stored) })
	if err := commit(ctx, st, b, in.IntentID); err != nil {
		return err
	}
	out.Body = []byte(stored)
	return nil
}

// commit sends b's writes and COMMIT in one round trip. A write that
// PostgreSQL refuses skips the COMMIT (the pipeline stops at the first
// error), so the transaction is rolled back, with nothing written. Any
// other failure once the batch may have left — a lost connection, a
// timeout — leaves the outcome unknown: PostgreSQL may have committed.
func commit(ctx context.Context, st *started, b *pgx.Batch, intentID string) error {
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return fmt.Errorf("transaction ended with %s", tag)
		}
		st.committed = true
		return nil
	})
	err := st.conn.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err):
		return unavailable("record intent", err)
	}
	st.committed = true // the connection is gone or unusable: no ROLLBACK on it
	return &OutcomeUnknownError{IntentID: intentID, Err: err}
}

// RequestHash is the fingerprint of a request recorded with its intent:
// SHA-256 of its type, entity, fork and payload (its keys sorted, as
// encoding/json writes a map).
func RequestHash(in intents.Intent) ([]byte, error) {
	b, err := json.Marshal([]any{in.IntentType, in.EntityID, in.ForkID, in.Payload})
	if err != nil {
		return nil, fmt.Errorf("fingerprint the request: %w", err)
	}
	h := sha256.Sum256(b)
	return h[:], nil
}

// recordedRow is an intent's row in causet_intents.
type recordedRow struct {
	status, rule, reason, body string
	version                    int
	hash                       []byte // nil for intents recorded before fingerprints
}

// outcome is the recorded outcome of intentID, replayed.
func (r recordedRow) outcome(intentID string) (Outcome, error) {
	out := Outcome{IntentID: intentID, Replayed: true, Rule: r.rule, Reason: r.reason, HandlerVersion: r.version,
		Body: []byte(r.body), Status: StatusRejected}
	if r.status == RecordedSucceeded {
		out.Status = StatusSuccess
		var b struct{ Events []event.Envelope }
		if err := json.Unmarshal(out.Body, &b); err != nil {
			return Outcome{}, fmt.Errorf("recorded response of %s: %w", intentID, err)
		}
		out.Events = b.Events
	}
	return out, nil
}

// IntentStatus is what is known of an intent: Status is RecordedUnknown,
// RecordedSucceeded (with Events, the envelopes as recorded) or
// RecordedRejected (with Rule and Reason).
type IntentStatus struct {
	IntentID     string
	Status       string
	Rule, Reason string
	Events       []json.RawMessage
}

// Status reads the recorded outcome of intentID. Connection acquisition is
// retried as for Submit.
func (l *Ledger) Status(ctx context.Context, intentID string) (IntentStatus, error) {
	conn, err := attempt(ctx, l, "acquire", l.pool.Acquire)
	if err != nil {
		return IntentStatus{}, err
	}
	defer conn.Release()
	st := IntentStatus{IntentID: intentID, Status: RecordedUnknown}
	var body string
	err = conn.QueryRow(ctx, "SELECT status, COALESCE(rule, ''), COALESCE(reason, ''), response::text FROM causet_intents WHERE intent_id = $1",
		intentID).Scan(&st.Status, &st.Rule, &st.Reason, &body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, nil
	case err != nil:
		return IntentStatus{}, unavailable("read intent status", err)
	}
	if st.Status == RecordedSucceeded {
		var b struct{ Events []json.RawMessage }
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			return IntentStatus{}, fmt.Errorf("recorded response of %s: %w", intentID, err)
		}
		st.Events = b.Events
	}
	return st, nil
}
