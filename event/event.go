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

// MaxDepth bounds JSON nesting so a hostile payload cannot exhaust the stack.
const MaxDepth = 64

// Limits of the identifying fields, in bytes. They keep a workflow ID
// (projection-retry:<projection>:<forkId>:<eventId>, a projection name being
// at most 63 bytes and each escaped field at most 3 times its length) under
// Temporal's 1000-byte ID limit, the CausetEventType, CausetEntityId and
// CausetForkId keyword search attributes under 255 characters (SQL
// visibility's keyword columns), and the dedupe ledger's primary key
// (projection, fork_id, event_id) far below PostgreSQL's ~2.7 KB btree entry.
const (
	MaxEventIDBytes   = 200
	MaxEventTypeBytes = 200 // as long as an IR's source_events entry may be
	MaxEntityIDBytes  = 200
	MaxForkIDBytes    = 100
	MaxIntentIDBytes  = 200
)

// MaxEncodedPayloadBytes bounds the payload as a workflow input encodes it
// (EncodedSize). Temporal refuses a payload over 2 MiB: a retry workflow's
// input and each of its activities' inputs hold the event once, beside its
// attempts, and the headroom keeps a payload of this size far from that
// limit.
const MaxEncodedPayloadBytes = 512 << 10

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
	if err := CheckBytes(value); err != nil {
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
	if err := env.checkLengths(); err != nil {
		return Envelope{}, err
	}
	if n := EncodedSize(p); n > MaxEncodedPayloadBytes {
		return Envelope{}, invalid("payload encodes to %d bytes as a workflow input, more than the %d allowed", n, MaxEncodedPayloadBytes)
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

// checkLengths applies the Max*Bytes limits. Decode applies them, not
// Validate: an event admitted before they existed may still be retried and
// replayed under the workflow ID it already has.
func (e Envelope) checkLengths() error {
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"eventId", e.EventID, MaxEventIDBytes}, {"eventType", e.EventType, MaxEventTypeBytes},
		{"entityId", e.EntityID, MaxEntityIDBytes}, {"forkId", e.ForkID, MaxForkIDBytes},
		{"intentId", e.IntentID, MaxIntentIDBytes},
	} {
		if len(f.value) > f.max {
			return invalid("%s is %d bytes, more than the %d allowed", f.name, len(f.value), f.max)
		}
	}
	return nil
}

// EncodedSize is the size of raw, a JSON value, once encoding/json encodes
// it as a json.RawMessage, as the Temporal SDK's JSON converter does inside a
// workflow input: whitespace between tokens is dropped, and '<', '>', '&'
// (1 byte) and U+2028, U+2029 (3 bytes) become 6-byte \u escapes, so an
// input can be up to 6 times the size of the record. Exact for valid JSON;
// of a whole record value, within a few bytes of its Envelope's encoding
// (which drops unknown fields and normalizes occurredAt).
func EncodedSize(raw []byte) int {
	n := len(raw)
	inString, escaped := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !encodeSpecial[c] {
			escaped = false
			continue
		}
		switch {
		case c == '<' || c == '>' || c == '&':
			n += 5
		case c == 0xE2:
			// Checked wherever it is, as encoding/json does.
			if i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8 {
				n += 3
				i += 2
			}
		case escaped:
			escaped = false
		case c == '\\':
			escaped = inString
		case c == '"':
			inString = !inString
		case !inString: // whitespace
			n--
		}
	}
	return n
}

// encodeSpecial marks the bytes EncodedSize looks at.
var encodeSpecial = func() (t [256]bool) {
	for _, c := range []byte("<>&\xe2\\\" \t\n\r") {
		t[c] = true
	}
	return t
}()

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
	return ConvertNumbers(v, convertNumber)
}

// ConvertNumbers replaces every json.Number in v, a value decoded with
// UseNumber, by what number returns for its text, failing with number's
// first error.
func ConvertNumbers(v any, number func(string) (any, error)) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			c, err := ConvertNumbers(x, number)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case []any:
		for i, x := range t {
			c, err := ConvertNumbers(x, number)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case json.Number:
		return number(string(t))
	default:
		return v, nil
	}
}

// convertNumber turns a payload's JSON number into int64 (integral) or
// float64.
func convertNumber(s string) (any, error) {
	n, err := ParseNumber(s)
	if err != nil {
		return nil, invalid("payload %v", err)
	}
	return n, nil
}

// ParseNumber turns the text of a JSON number into int64 (integral) or
// float64. An integer past 64 bits or a number past float64's range is an
// error.
func ParseNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("number %s does not fit a 64-bit integer", abbreviate(s))
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %s is out of range", abbreviate(s))
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

// CheckBytes rejects, before a decoder runs, NUL anywhere in b, JSON text (a
// 0 byte or \u0000, which PostgreSQL text and jsonb cannot hold), and
// nesting deeper than MaxDepth (the decoder recurses). The error is an
// *InvalidError.
func CheckBytes(b []byte) error {
	depth, inString, escaped := 0, false, false
	for i, c := range b {
		switch {
		case c == 0:
			return invalid("NUL byte at offset %d (PostgreSQL text cannot hold it)", i)
		case escaped:
			escaped = false
			if c == 'u' && bytes.HasPrefix(b[i+1:], []byte("0000")) {
				return invalid("NUL (\\u0000) at offset %d (PostgreSQL text cannot hold it)", i-1)
			}
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			if depth > MaxDepth {
				return invalid("JSON nesting deeper than %d levels", MaxDepth)
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
