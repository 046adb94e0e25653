package intents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/celexpr"
)

// Limits of an intent, beside the ID limits of the event envelope
// (event.MaxIntentIDBytes and friends), which the intent's events inherit.
const (
	// MaxPayloadBytes bounds an intent's payload as received.
	MaxPayloadBytes = 256 << 10
	// MaxDepth bounds JSON nesting, as the event envelope does.
	MaxDepth = event.MaxDepth
	// MaxRowBytes bounds one row read for a rule, as to_jsonb renders it.
	MaxRowBytes = 1 << 20
)

// Intent is one request to change an entity.
type Intent struct {
	IntentID   string
	IntentType string
	EntityID   string
	ForkID     string
	// Payload is the intent's JSON object as ParsePayload returns it
	// (integral numbers int64, others float64). Decide does not change it.
	Payload map[string]any
}

// ErrUnknownIntentType is wrapped by the error for an intent type that has
// no deployed handler.
var ErrUnknownIntentType = errors.New("unknown intentType")

func unknownType(t string) error {
	return fmt.Errorf("%w %s: no intent handler is deployed for it", ErrUnknownIntentType, strconv.Quote(t))
}

// InvalidError says why an intent can never be accepted, whatever the
// handler.
type InvalidError struct {
	Reason string
}

func (e *InvalidError) Error() string { return e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// EvalError is an expression that failed to evaluate (a CEL error, the cost
// limit, a value of the wrong type); Path names it, e.g. rules[0].reason.
type EvalError = celexpr.EvalError

// ReadError is a Reader failure for the read Read of the handler.
type ReadError struct {
	Read, Table string
	Err         error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("reads.%s (table %s): %v", e.Read, e.Table, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// Validate checks the identifying fields: present, valid UTF-8 without NUL,
// within the envelope's limits (intentId and entityId 200 bytes, forkId 100,
// intentType 200 like an event type), and a payload.
func (in Intent) Validate() error {
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"intentId", in.IntentID, event.MaxIntentIDBytes},
		{"intentType", in.IntentType, event.MaxEventTypeBytes},
		{"entityId", in.EntityID, event.MaxEntityIDBytes},
		{"forkId", in.ForkID, event.MaxForkIDBytes},
	} {
		switch {
		case strings.TrimSpace(f.value) == "":
			return invalid("%s is required and must be a non-empty string", f.name)
		case len(f.value) > f.max:
			return invalid("%s is %d bytes, more than the %d allowed", f.name, len(f.value), f.max)
		case strings.ContainsRune(f.value, 0):
			return invalid("%s contains NUL (PostgreSQL text cannot hold it)", f.name)
		case !utf8.ValidString(f.value):
			return invalid("%s is not valid UTF-8", f.name)
		}
	}
	if err := CheckIntentID(in.IntentID); err != nil {
		return err
	}
	if in.Payload == nil {
		return invalid("payload is required and must be a JSON object")
	}
	return nil
}

// IntentIDCharacters are the characters an intentId may hold: it is a path
// segment of GET /v1/intents/{id} and part of its events' IDs, so it needs
// no escaping anywhere.
const IntentIDCharacters = "A-Z a-z 0-9 - _ . : ~ @"

// CheckIntentID checks an intentId: 1 to event.MaxIntentIDBytes of
// IntentIDCharacters, not "." or ".." (a path segment that means another
// path), so that its status can always be read back.
func CheckIntentID(id string) error {
	switch {
	case id == "":
		return invalid("intentId is required and must be a non-empty string")
	case len(id) > event.MaxIntentIDBytes:
		return invalid("intentId is %d bytes, more than the %d allowed", len(id), event.MaxIntentIDBytes)
	case id == "." || id == "..":
		return invalid("intentId %q is a relative path segment: its status could never be read", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= utf8.RuneSelf:
			return invalid("intentId has a non-ASCII character at byte %d: it may hold only %s", i, IntentIDCharacters)
		case !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:~@", c) >= 0):
			return invalid("intentId has %q at byte %d: it may hold only %s", rune(c), i, IntentIDCharacters)
		}
	}
	return nil
}

// ParsePayload decodes an intent payload: a JSON object of at most
// MaxPayloadBytes, without NUL, nested at most MaxDepth levels, whose
// integral numbers fit 64 bits (they become int64, others float64).
func ParsePayload(raw []byte) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, invalid("payload is required and must be a JSON object")
	}
	if len(raw) > MaxPayloadBytes {
		return nil, invalid("payload is %d bytes, more than the %d allowed", len(raw), MaxPayloadBytes)
	}
	if err := CheckJSON(raw); err != nil {
		return nil, err
	}
	v, err := decodeJSON(raw, true)
	if err != nil {
		return nil, invalid("payload: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("payload is required and must be a JSON object")
	}
	return obj, nil
}

// CheckJSON refuses, before a decoder runs, what PostgreSQL and the event
// envelope cannot hold: invalid UTF-8, NUL (a 0 byte or \u0000) anywhere,
// and nesting deeper than MaxDepth.
func CheckJSON(b []byte) error {
	if !utf8.Valid(b) {
		return invalid("not valid UTF-8")
	}
	if err := event.CheckBytes(b); err != nil {
		var ie *event.InvalidError
		if errors.As(err, &ie) {
			return &InvalidError{Reason: ie.Reason}
		}
		return err
	}
	return nil
}

// decodeJSON decodes one JSON value with integral numbers as int64 and
// others as float64. Unless strict, an integer past 64 bits becomes a
// float64 and a float past float64 its text: rows are what the database
// holds, not input to refuse.
func decodeJSON(raw []byte, strict bool) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	if strict {
		return event.ConvertNumbers(v, event.ParseNumber)
	}
	return event.ConvertNumbers(v, lenientNumber)
}

// lenientNumber is event.ParseNumber, but an integer past 64 bits becomes a
// float64 and a number past float64 stays text.
func lenientNumber(s string) (any, error) {
	if n, err := event.ParseNumber(s); err == nil {
		return n, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) {
		return f, nil
	}
	return s, nil
}
