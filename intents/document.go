package intents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
)

// Bounds of a handler document, so that one decision stays a small,
// bounded amount of work inside the ledger transaction.
const (
	MaxReads = 16
	MaxRules = 64
	MaxEmits = 100
)

// Document is one intent handler document.
type Document struct {
	// IntentType is the intent type the handler decides. Required.
	IntentType string `json:"intent_type"`
	// Version is informational; Deploy assigns the deployed version number.
	Version int `json:"version,omitempty"`
	// Reads maps a name (seen by rules as reads.<name>) to a row to read.
	Reads map[string]Read `json:"reads,omitempty"`
	// Rules are checked in order; the first that rejects decides.
	Rules []Rule `json:"rules,omitempty"`
	// Emits lists the events of an accepted intent, in order. Required.
	Emits []Emit `json:"emits"`
}

// Read is one row of a read model, found by its key.
type Read struct {
	Table string `json:"table"`
	// Key maps each key column to a CEL expression over intent.
	Key map[string]string `json:"key"`
}

// Rule rejects the intent when RejectIf (CEL, bool) is true, with Reason
// (CEL, string).
type Rule struct {
	Name     string `json:"name"`
	RejectIf string `json:"reject_if"`
	Reason   string `json:"reason"`
}

// Emit is one event of an accepted intent.
type Emit struct {
	EventType string `json:"event_type"`
	// Payload maps each payload field to a CEL expression.
	Payload map[string]string `json:"payload"`
}

var typeRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,200}$`)

// ValidationError lists every fault found in a document; each names its
// path, such as "rules[0].reject_if".
type ValidationError struct {
	Problems []projection.Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid intent handler: " + strings.Join(lines, "; ")
}

// Parse decodes a YAML or JSON document, rejects unknown fields with their
// path, and validates it. Expressions written as YAML numbers, booleans or
// null are taken as CEL literals. opts are Validate's.
func Parse(data []byte, opts ...Option) (*Document, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty intent handler document")
	}
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decode intent handler document: %w", err)
	}
	c := &checker{}
	top, ok := normalize(c, "", raw).(map[string]any)
	if err := c.err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("decode intent handler document: not a mapping")
	}
	checkFields(c, top)
	if err := c.err(); err != nil {
		return nil, err
	}
	j, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("decode intent handler document: %w", err)
	}
	var doc Document
	if err := json.Unmarshal(j, &doc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &ValidationError{Problems: []projection.Problem{{Path: te.Field, Message: fmt.Sprintf("must be %s, not %s", friendlyType(te.Type.String()), te.Value)}}}
		}
		return nil, fmt.Errorf("decode intent handler document: %w", err)
	}
	if err := Validate(&doc, opts...); err != nil {
		return nil, err
	}
	return &doc, nil
}

// ParseFile reads and parses one document; errors name the file.
func ParseFile(path string, opts ...Option) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := Parse(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// Validate checks a document and compiles its CEL expressions. The error, a
// *ValidationError, names the path of every fault, including an expression
// whose worst-case cost is unbounded or over the cost limit.
func Validate(doc *Document, opts ...Option) error {
	_, err := compile(doc, 0, newOptions(opts))
	return err
}

func friendlyType(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int":
		return "an integer"
	case "map[string]string":
		return "a mapping of name to CEL expression"
	case "map[string]intents.Read":
		return "a mapping of name to {table, key}"
	case "[]intents.Rule":
		return "a list of {name, reject_if, reason}"
	case "[]intents.Emit":
		return "a list of {event_type, payload}"
	}
	return t
}

// normalize turns YAML values into JSON-encodable ones, taking scalar keys
// as strings like YAML-to-JSON converters do.
func normalize(c *checker, path string, v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalize(c, join(path, k), x)
		}
		return t
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			switch k.(type) {
			case string, int, int64, uint64, float64, bool:
				ks := fmt.Sprint(k)
				out[ks] = normalize(c, join(path, ks), x)
			default:
				c.add(path, "key %v is not a string", k)
			}
		}
		return out
	case []any:
		for i, x := range t {
			t[i] = normalize(c, fmt.Sprintf("%s[%d]", path, i), x)
		}
		return t
	}
	return v
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkFields rejects unknown fields and turns scalar expressions into CEL
// source text.
func checkFields(c *checker, top map[string]any) {
	known(c, "", top, "intent_type", "version", "reads", "rules", "emits")
	reads, _ := top["reads"].(map[string]any)
	for _, name := range sortedKeys(reads) {
		if r, ok := reads[name].(map[string]any); ok {
			known(c, "reads."+name, r, "table", "key")
			literals(r["key"])
		}
	}
	rules, _ := top["rules"].([]any)
	for i, x := range rules {
		if r, ok := x.(map[string]any); ok {
			known(c, fmt.Sprintf("rules[%d]", i), r, "name", "reject_if", "reason")
			literals(r, "reject_if", "reason")
		}
	}
	emits, _ := top["emits"].([]any)
	for i, x := range emits {
		if e, ok := x.(map[string]any); ok {
			known(c, fmt.Sprintf("emits[%d]", i), e, "event_type", "payload")
			literals(e["payload"])
		}
	}
}

func known(c *checker, path string, m map[string]any, fields ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(fields, k) {
			c.add(join(path, k), "unknown field (want one of %s)", strings.Join(fields, ", "))
		}
	}
}

// literals rewrites YAML numbers, booleans and null among m's values (only
// those of keys, when given) as CEL literals.
func literals(v any, keys ...string) {
	m, _ := v.(map[string]any)
	for k, x := range m {
		if len(keys) > 0 && !slices.Contains(keys, k) {
			continue
		}
		switch x.(type) {
		case int, int64, uint64, float64, bool:
			m[k] = fmt.Sprint(x)
		case nil:
			m[k] = "null"
		}
	}
}

type checker struct{ problems []projection.Problem }

func (c *checker) add(path, format string, args ...any) {
	c.problems = append(c.problems, projection.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) ident(path, s string) bool {
	if !projection.ValidIdentifier(s) {
		c.add(path, "%s is not a plain SQL identifier (want ^[a-z_][a-z0-9_]{0,62}$)", strconv.Quote(s))
		return false
	}
	return true
}

func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: c.problems}
}

// checkShape validates everything except CEL expressions.
func checkShape(c *checker, doc *Document) {
	if doc.IntentType == "" {
		c.add("intent_type", "is required")
	} else if !typeRE.MatchString(doc.IntentType) {
		c.add("intent_type", "%s is not a valid intent type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(doc.IntentType))
	}
	if doc.Version < 0 {
		c.add("version", "must not be negative")
	}
	if len(doc.Reads) > MaxReads {
		c.add("reads", "has %d entries, more than the %d allowed", len(doc.Reads), MaxReads)
	}
	for _, name := range sortedKeys(doc.Reads) {
		r, base := doc.Reads[name], "reads."+name
		c.ident(base, name)
		if r.Table == "" {
			c.add(base+".table", "is required")
		} else {
			c.ident(base+".table", r.Table)
		}
		if len(r.Key) == 0 {
			c.add(base+".key", "must map at least one key column to an expression")
		}
		for _, col := range sortedKeys(r.Key) {
			c.ident(base+".key."+col, col)
		}
	}
	if len(doc.Rules) > MaxRules {
		c.add("rules", "has %d entries, more than the %d allowed", len(doc.Rules), MaxRules)
	}
	names := map[string]bool{}
	for i, r := range doc.Rules {
		base := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			c.add(base+".name", "is required")
		case !c.ident(base+".name", r.Name):
		case names[r.Name]:
			c.add(base+".name", "duplicate rule name %q", r.Name)
		}
		names[r.Name] = true
	}
	switch {
	case len(doc.Emits) == 0:
		c.add("emits", "must list at least one event")
	case len(doc.Emits) > MaxEmits:
		c.add("emits", "has %d entries, more than the %d allowed", len(doc.Emits), MaxEmits)
	}
	for i, e := range doc.Emits {
		base := fmt.Sprintf("emits[%d]", i)
		if !typeRE.MatchString(e.EventType) {
			c.add(base+".event_type", "%s is not a valid event type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(e.EventType))
		}
		if e.Payload == nil {
			c.add(base+".payload", "is required (a mapping of payload field to CEL expression)")
		}
		for _, f := range sortedKeys(e.Payload) {
			if f == "" || len(f) > event.MaxEventTypeBytes || strings.ContainsRune(f, 0) || !utf8.ValidString(f) {
				c.add(base+".payload", "field name %s must be 1 to %d bytes of UTF-8 without NUL", strconv.Quote(f), event.MaxEventTypeBytes)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
