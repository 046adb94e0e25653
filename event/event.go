// Package event decodes and validates the Causet event envelope carried as
// the value of records on the events topic.
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxSize bounds a record value; larger values are poison records rather than
// something to hold in memory, retry and copy into workflow histories.
const MaxSize = 1 << 20

// maxDepth bounds JSON nesting so a hostile payload cannot exhaust the stack.
const maxDepth = 64

// Envelope is one event as published by causet-runtime.
type Envelope struct {
	EventID    string          `json:"eventId"`
	EventType  string          `json:"eventType"`
	EntityID   string          `json:"entityId"`
	ForkID     string          `json:"forkId"`
	IntentID   string          `json:"intentId,omitempty"`
	Sequence   int64           `json:"sequence,omitempty"`
	OccurredAt time.Time       `json:"occurredAt,omitzero"`
	Payload    json.RawMessage `json:"payload"`
}

// InvalidError says why a record is not an envelope. Such a record is never
// retried: it goes to the dead-letter topic as errorKind "invalid_event".
type InvalidError struct {
	Reason string
}

func (e *InvalidError) Error() string { return "invalid event: " + e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err (or an error it wraps) is an *InvalidError.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// Decode parses and validates one record value.
func Decode(value []byte) (Envelope, error) {
	var env Envelope
	if len(value) == 0 {
		return env, invalid("empty record value")
	}
	if len(value) > MaxSize {
		return env, invalid("record value is %d bytes, more than the %d allowed", len(value), MaxSize)
	}
	if !utf8.Valid(value) {
		return env, invalid("record value is not valid UTF-8")
	}
	if err := checkDepth(value); err != nil {
		return env, err
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(&env); err != nil {
		return Envelope{}, invalid("not a JSON envelope: %v", err)
	}
	if dec.More() {
		return Envelope{}, invalid("trailing data after the JSON envelope")
	}
	p, err := env.checkShape()
	if err != nil {
		return Envelope{}, err
	}
	// The decoder has checked the payload's syntax: what Fields could still
	// refuse is a number, checked here without building the map the
	// projection engine builds once, when it evaluates the event.
	if err := checkNumbers(p); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// Validate checks the required fields and that the payload is a JSON
// object that Fields accepts.
func (e Envelope) Validate() error {
	if _, err := e.checkShape(); err != nil {
		return err
	}
	if _, err := e.Fields(); err != nil {
		return err
	}
	return nil
}

// checkShape checks the required fields and returns the payload, which
// must start as a JSON object.
func (e Envelope) checkShape() ([]byte, error) {
	for _, f := range []struct{ name, value string }{
		{"eventId", e.EventID}, {"eventType", e.EventType}, {"entityId", e.EntityID}, {"forkId", e.ForkID},
	} {
		if strings.TrimSpace(f.value) == "" {
			return nil, invalid("%s is required and must be a non-empty string", f.name)
		}
	}
	p := bytes.TrimSpace(e.Payload)
	if len(p) == 0 || p[0] != '{' {
		return nil, invalid("payload is required and must be a JSON object")
	}
	return p, nil
}

// Fields returns the envelope as a map for expression evaluation. Integral
// JSON numbers become int64 (so integer division by zero is an error, as
// users expect), other numbers float64.
func (e Envelope) Fields() (map[string]any, error) {
	payload, err := decodeValue(e.Payload)
	if err != nil {
		return nil, err
	}
	obj, ok := payload.(map[string]any)
	if !ok {
		return nil, invalid("payload must be a JSON object")
	}
	m := map[string]any{
		"eventId":   e.EventID,
		"eventType": e.EventType,
		"entityId":  e.EntityID,
		"forkId":    e.ForkID,
		"intentId":  e.IntentID,
		"sequence":  e.Sequence,
		"payload":   obj,
	}
	if !e.OccurredAt.IsZero() {
		m["occurredAt"] = e.OccurredAt
	}
	return m, nil
}

func decodeValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("payload: %v", err)
	}
	return convertNumbers(v)
}

func convertNumbers(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			c, err := convertNumbers(x)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case []any:
		for i, x := range t {
			c, err := convertNumbers(x)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case json.Number:
		return convertNumber(string(t))
	default:
		return v, nil
	}
}

// convertNumber turns a JSON number into int64 (integral) or float64.
func convertNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, invalid("payload number %s does not fit a 64-bit integer", abbreviate(s))
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, invalid("payload number %s is out of range", abbreviate(s))
	}
	return f, nil
}

// checkNumbers applies convertNumber's checks to every number of b, which
// must be valid JSON, without decoding it.
func checkNumbers(b []byte) error {
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-' || (b[j] >= '0' && b[j] <= '9')) {
				j++
			}
			if _, err := convertNumber(string(b[i:j])); err != nil {
				return err
			}
			i = j - 1
		}
	}
	return nil
}

// checkDepth rejects nesting deeper than maxDepth before the decoder recurses.
func checkDepth(b []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				return invalid("JSON nesting deeper than %d levels", maxDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

func abbreviate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
