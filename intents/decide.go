package intents

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/celexpr"
)

// KeyColumn is one column of a read's key with its evaluated value.
type KeyColumn struct {
	Name  string
	Value any // nil, bool, int64, uint64, float64, string, []byte or time.Time
}

// Reader reads one row of table by key, inside the caller's transaction.
// It returns nil (and no error) when no row has the key.
type Reader interface {
	Read(ctx context.Context, table string, key []KeyColumn) (map[string]any, error)
}

// Querier is what NewReader reads with: a pgx.Tx, a connection or a pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// NewReader reads rows with q (usually the ledger's transaction), as
// to_jsonb renders them.
func NewReader(q Querier) Reader { return pgReader{q: q} }

type pgReader struct{ q Querier }

func (r pgReader) Read(ctx context.Context, table string, key []KeyColumn) (map[string]any, error) {
	cols := make([]string, len(key))
	args := make([]any, len(key))
	for i, k := range key {
		cols[i], args[i] = k.Name, k.Value
	}
	rows, err := r.q.Query(ctx, readSQL(table, cols), args...)
	if err != nil {
		return nil, err
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	switch {
	case len(texts) == 0:
		return nil, nil
	case len(texts) > 1:
		return nil, fmt.Errorf("the key matches more than one row")
	case len(texts[0]) > MaxRowBytes:
		return nil, fmt.Errorf("the row is %d bytes as JSON, more than the %d allowed", len(texts[0]), MaxRowBytes)
	}
	v, err := decodeJSON([]byte(texts[0]), false)
	if err != nil {
		return nil, err
	}
	row, _ := v.(map[string]any)
	return row, nil
}

// Decision is the outcome of a handler for one intent: rejected by Rule
// with Reason, or accepted with Events.
type Decision struct {
	IntentType     string
	HandlerVersion int
	Rule, Reason   string
	Events         []Emitted
}

// Rejected reports whether a rule rejected the intent.
func (d Decision) Rejected() bool { return d.Rule != "" }

// Emitted is one event an accepted intent emits; the ledger gives it its
// ID, sequence and time.
type Emitted struct {
	EventType string
	Payload   json.RawMessage // a JSON object
}

// Decide evaluates the handler for in: reads its rows with r, runs its rules
// and, if none rejects, builds its events. The same intent and the same rows
// always give the same decision.
func (h *Handler) Decide(ctx context.Context, in Intent, r Reader) (Decision, error) {
	if in.IntentType != h.doc.IntentType {
		return Decision{}, fmt.Errorf("handler of %s cannot decide an intent of type %s", h.doc.IntentType, in.IntentType)
	}
	if err := in.Validate(); err != nil {
		return Decision{}, err
	}
	// Checked whatever the rules decide, so an intent ID is refused or not
	// by the handler alone.
	if n := len(h.emits); len(in.IntentID)+1+len(strconv.Itoa(n)) > event.MaxEventIDBytes {
		return Decision{}, invalid("intentId is %d bytes: the ID of its event %d (<intentId>:%d) would be %d bytes, more than the %d allowed",
			len(in.IntentID), n, n, len(in.IntentID)+1+len(strconv.Itoa(n)), event.MaxEventIDBytes)
	}
	intent := map[string]any{"intentId": in.IntentID, "intentType": in.IntentType,
		"entityId": in.EntityID, "forkId": in.ForkID, "payload": in.Payload}
	reads := make(map[string]any, len(h.reads))
	vars := map[string]any{"intent": intent, "reads": reads}
	load := func(needs []int) error {
		for _, i := range needs {
			if rd := &h.reads[i]; !hasKey(reads, rd.name) {
				row, err := h.read(ctx, rd, vars, r)
				if err != nil {
					return err
				}
				if row == nil {
					reads[rd.name] = nil // a nil map would be an empty map in CEL, not null
				} else {
					reads[rd.name] = row
				}
			}
		}
		return nil
	}
	d := Decision{IntentType: h.doc.IntentType, HandlerVersion: h.version}
	for _, rule := range h.rules {
		if err := load(rule.needs); err != nil {
			return Decision{}, err
		}
		v, err := h.eval(ctx, rule.rejectIf, vars)
		if err != nil {
			return Decision{}, err
		}
		reject, ok := v.(types.Bool)
		if !ok {
			return Decision{}, &EvalError{Path: rule.rejectIf.path, Err: fmt.Errorf("got %s, want a bool", v.Type().TypeName())}
		}
		if !reject {
			continue
		}
		v, err = h.eval(ctx, rule.reason, vars)
		if err != nil {
			return Decision{}, err
		}
		reason, ok := v.(types.String)
		if !ok {
			return Decision{}, &EvalError{Path: rule.reason.path, Err: fmt.Errorf("got %s, want a string", v.Type().TypeName())}
		}
		d.Rule, d.Reason = rule.name, string(reason)
		return d, nil
	}
	if err := load(h.emitNeeds); err != nil {
		return Decision{}, err
	}
	for _, e := range h.emits {
		payload := make(map[string]any, len(e.fields))
		for i, f := range e.fields {
			v, err := h.eval(ctx, e.values[i], vars)
			if err != nil {
				return Decision{}, err
			}
			j, err := jsonValue(v)
			if err != nil {
				return Decision{}, &EvalError{Path: e.values[i].path, Err: err}
			}
			payload[f] = j
		}
		raw, err := json.Marshal(payload)
		if err != nil {
			return Decision{}, fmt.Errorf("encode %s payload: %w", e.eventType, err)
		}
		d.Events = append(d.Events, Emitted{EventType: e.eventType, Payload: raw})
	}
	return d, nil
}

// read evaluates the key of rd and reads its row with r.
func (h *Handler) read(ctx context.Context, rd *compiledRead, vars map[string]any, r Reader) (map[string]any, error) {
	key := make([]KeyColumn, len(rd.cols))
	for i, col := range rd.cols {
		v, err := h.eval(ctx, rd.keys[i], vars)
		if err != nil {
			return nil, err
		}
		b, err := bindValue(v)
		if err != nil {
			return nil, &EvalError{Path: rd.keys[i].path, Err: err}
		}
		key[i] = KeyColumn{Name: col, Value: b}
	}
	row, err := r.Read(ctx, rd.table, key)
	if err != nil {
		return nil, &ReadError{Read: rd.name, Table: rd.table, Err: err}
	}
	return row, nil
}

// eval evaluates one expression. An evaluation that ctx stops returns ctx's
// error, not an *EvalError: the intent is not at fault.
func (h *Handler) eval(ctx context.Context, x expr, vars map[string]any) (ref.Val, error) {
	return celexpr.Eval(ctx, x.prg, vars, x.path, h.costLimit, true)
}

// bindValue converts a key value for a query parameter.
func bindValue(v ref.Val) (any, error) {
	if b, ok := celexpr.Scalar(v); ok {
		return b, nil
	}
	return nil, fmt.Errorf("a key value must be a scalar, not %s", v.Type().TypeName())
}

// jsonValue converts a CEL value to one encoding/json renders.
func jsonValue(v ref.Val) (any, error) {
	return celexpr.JSON(v, jsonScalar)
}

// jsonScalar converts a number, string, bool or null for jsonValue,
// refusing a number an event cannot hold.
func jsonScalar(v ref.Val) (any, error) {
	switch t := v.(type) {
	case types.Uint:
		if t > math.MaxInt64 {
			return nil, fmt.Errorf("%d does not fit an event's 64-bit integers", uint64(t))
		}
	case types.Double:
		f := float64(t)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return nil, fmt.Errorf("%v cannot be represented in JSON", f)
		case f == math.Trunc(f) && (f >= 1<<63 || f < -(1<<63)):
			// PostgreSQL renders it as an integer, which an event cannot hold.
			return nil, fmt.Errorf("%v does not fit an event's 64-bit integers", f)
		}
	}
	if j, ok := celexpr.Scalar(v); ok {
		return j, nil
	}
	return nil, fmt.Errorf("unsupported result type %s", v.Type().TypeName())
}
