package intents

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/celexpr"
	"github.com/causet/projection-retry/internal/docparse"
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
	Problems []docparse.Problem
}

func (e *ValidationError) Error() string { return docFormat.Message(e.Problems) }

// docFormat is how handler documents are decoded and their faults reported.
var docFormat = docparse.Format{
	Kind:   "intent handler",
	Fields: checkFields,
	Types: map[string]string{
		"map[string]string":       "a mapping of name to CEL expression",
		"map[string]intents.Read": "a mapping of name to {table, key}",
		"[]intents.Rule":          "a list of {name, reject_if, reason}",
		"[]intents.Emit":          "a list of {event_type, payload}",
	},
	Invalid: func(ps []docparse.Problem) error { return &ValidationError{Problems: ps} },
}

// Parse decodes a YAML or JSON document, rejects unknown fields with their
// path, and validates it. Expressions written as YAML numbers, booleans or
// null are taken as CEL literals. opts are Validate's.
func Parse(data []byte, opts ...Option) (*Document, error) {
	return docparse.Parse(docFormat, data, func(doc *Document) error { return Validate(doc, opts...) })
}

// ParseFile reads and parses one document; errors name the file.
func ParseFile(path string, opts ...Option) (*Document, error) {
	return docparse.ParseFile(path, func(data []byte) (*Document, error) { return Parse(data, opts...) })
}

// Validate checks a document and compiles its CEL expressions. The error, a
// *ValidationError, names the path of every fault, including an expression
// whose worst-case cost is unbounded or over the cost limit.
func Validate(doc *Document, opts ...Option) error {
	_, err := compile(doc, 0, celexpr.NewOptions(opts))
	return err
}

// checkFields rejects unknown fields and turns scalar expressions into CEL
// source text.
func checkFields(c *docparse.Checker, top map[string]any) {
	c.Known("", top, "intent_type", "version", "reads", "rules", "emits")
	reads, _ := top["reads"].(map[string]any)
	for _, name := range docparse.SortedKeys(reads) {
		if r, ok := reads[name].(map[string]any); ok {
			c.Known("reads."+name, r, "table", "key")
			docparse.Literals(r["key"])
		}
	}
	rules, _ := top["rules"].([]any)
	for i, x := range rules {
		if r, ok := x.(map[string]any); ok {
			c.Known(fmt.Sprintf("rules[%d]", i), r, "name", "reject_if", "reason")
			docparse.Literals(r, "reject_if", "reason")
		}
	}
	emits, _ := top["emits"].([]any)
	for i, x := range emits {
		if e, ok := x.(map[string]any); ok {
			c.Known(fmt.Sprintf("emits[%d]", i), e, "event_type", "payload")
			docparse.Literals(e["payload"])
		}
	}
}

// checkShape validates everything except CEL expressions.
func checkShape(c *docparse.Checker, doc *Document) {
	if doc.IntentType == "" {
		c.Add("intent_type", "is required")
	} else if !typeRE.MatchString(doc.IntentType) {
		c.Add("intent_type", "%s is not a valid intent type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(doc.IntentType))
	}
	if doc.Version < 0 {
		c.Add("version", "must not be negative")
	}
	if len(doc.Reads) > MaxReads {
		c.Add("reads", "has %d entries, more than the %d allowed", len(doc.Reads), MaxReads)
	}
	for _, name := range docparse.SortedKeys(doc.Reads) {
		r, base := doc.Reads[name], "reads."+name
		c.Ident(base, name)
		if r.Table == "" {
			c.Add(base+".table", "is required")
		} else {
			c.Ident(base+".table", r.Table)
		}
		if len(r.Key) == 0 {
			c.Add(base+".key", "must map at least one key column to an expression")
		}
		for _, col := range docparse.SortedKeys(r.Key) {
			c.Ident(base+".key."+col, col)
		}
	}
	if len(doc.Rules) > MaxRules {
		c.Add("rules", "has %d entries, more than the %d allowed", len(doc.Rules), MaxRules)
	}
	names := map[string]bool{}
	for i, r := range doc.Rules {
		base := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			c.Add(base+".name", "is required")
		case !c.Ident(base+".name", r.Name):
		case names[r.Name]:
			c.Add(base+".name", "duplicate rule name %q", r.Name)
		}
		names[r.Name] = true
	}
	switch {
	case len(doc.Emits) == 0:
		c.Add("emits", "must list at least one event")
	case len(doc.Emits) > MaxEmits:
		c.Add("emits", "has %d entries, more than the %d allowed", len(doc.Emits), MaxEmits)
	}
	for i, e := range doc.Emits {
		base := fmt.Sprintf("emits[%d]", i)
		if !typeRE.MatchString(e.EventType) {
			c.Add(base+".event_type", "%s is not a valid event type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(e.EventType))
		}
		if e.Payload == nil {
			c.Add(base+".payload", "is required (a mapping of payload field to CEL expression)")
		}
		for _, f := range docparse.SortedKeys(e.Payload) {
			if f == "" || len(f) > event.MaxEventTypeBytes || strings.ContainsRune(f, 0) || !utf8.ValidString(f) {
				c.Add(base+".payload", "field name %s must be 1 to %d bytes of UTF-8 without NUL", strconv.Quote(f), event.MaxEventTypeBytes)
			}
		}
	}
}
