package projection

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/causet/projection-retry/internal/docparse"
)

// Operation kinds.
const (
	OpUpsert    = "upsert"
	OpDelete    = "delete"
	OpIncrement = "increment"
)

// Document is one IR document.
type Document struct {
	// Name of the projection, a plain SQL identifier. Required.
	Name string `json:"name"`
	// Version is informational; Deploy assigns the deployed version number.
	Version int `json:"version,omitempty"`
	// SourceEvents lists the event types the projection consumes. Required.
	SourceEvents []string `json:"source_events"`
	// Table is the target table. Required.
	Table string `json:"table"`
	// Key lists the columns of the table's primary key (or a unique
	// constraint), used for ON CONFLICT and for delete. Required.
	Key []string `json:"key"`
	// On maps each source event type to its operation. Required.
	On map[string]Operation `json:"on"`
}

// Operation is what one event type does to the table.
type Operation struct {
	// Op is upsert, delete or increment.
	Op string `json:"op"`
	// Columns maps column names to CEL expressions.
	Columns map[string]string `json:"columns,omitempty"`
	// Increment (op increment only) maps column names to numeric CEL
	// expressions added to the current value.
	Increment map[string]string `json:"increment,omitempty"`
}

var eventTypeRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,200}$`)

// ValidIdentifier reports whether s is a plain SQL identifier as IR documents
// require: ^[a-z_][a-z0-9_]{0,62}$.
func ValidIdentifier(s string) bool { return docparse.ValidIdentifier(s) }

// Problem is one fault in a document, at a path such as
// "on.ARTIST_FOLLOWED.columns.followed_at".
type Problem = docparse.Problem

// ValidationError lists every fault found in a document.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string { return docFormat.Message(e.Problems) }

// docFormat is how IR documents are decoded and their faults reported.
var docFormat = docparse.Format{
	Kind:   "projection",
	Fields: checkFields,
	Types: map[string]string{
		"[]string":          "a list of strings",
		"map[string]string": "a mapping of column to CEL expression",
	},
	Invalid: func(ps []Problem) error { return &ValidationError{Problems: ps} },
}

// Parse decodes a YAML (1.2: `on` is a plain key) or JSON document, rejects
// unknown fields with their path, and validates it. Expressions written as
// YAML numbers, booleans or null (e.g. `plays: 1`) are taken as CEL literals.
// opts are Validate's.
func Parse(data []byte, opts ...Option) (*Document, error) {
	return docparse.Parse(docFormat, data, func(doc *Document) error { return Validate(doc, opts...) })
}

// checkFields rejects unknown fields and turns scalar expressions into CEL
// source text.
func checkFields(c *docparse.Checker, m map[string]any) {
	c.Known("", m, "name", "version", "source_events", "table", "key", "on")
	on, _ := m["on"].(map[string]any)
	for _, et := range docparse.SortedKeys(on) {
		op, ok := on[et].(map[string]any)
		if !ok {
			continue
		}
		for _, k := range docparse.SortedKeys(op) {
			switch k {
			case "op":
			case "columns", "increment":
				docparse.Literals(op[k])
			default:
				c.Add("on."+et+"."+k, "unknown field (want op, columns, increment)")
			}
		}
	}
}

// ParseFile reads and parses one document; errors name the file. opts are
// Validate's.
func ParseFile(path string, opts ...Option) (*Document, error) {
	return docparse.ParseFile(path, func(data []byte) (*Document, error) { return Parse(data, opts...) })
}

// Validate checks a document, compiling its CEL expressions. The error, a
// *ValidationError, names the path of every fault. An expression whose
// worst-case CEL cost over any valid envelope is unbounded or over the cost
// limit (WithCostLimit, default DefaultCostLimit) is a fault.
func Validate(doc *Document, opts ...Option) error {
	_, err := compile(doc, 0, opts...)
	return err
}

// checkShape validates everything except CEL expressions.
func checkShape(c *docparse.Checker, doc *Document) {
	if doc == nil {
		c.Add("", "document is empty")
		return
	}
	if doc.Name == "" {
		c.Add("name", "is required")
	} else {
		c.Ident("name", doc.Name)
	}
	if doc.Version < 0 {
		c.Add("version", "must not be negative")
	}
	if doc.Table == "" {
		c.Add("table", "is required")
	} else {
		c.Ident("table", doc.Table)
	}
	if len(doc.Key) == 0 {
		c.Add("key", "must list at least one column")
	}
	seen := map[string]bool{}
	for i, k := range doc.Key {
		p := fmt.Sprintf("key[%d]", i)
		if c.Ident(p, k) && seen[k] {
			c.Add(p, "duplicate key column %q", k)
		}
		seen[k] = true
	}
	if len(doc.SourceEvents) == 0 {
		c.Add("source_events", "must list at least one event type")
	}
	listed := map[string]bool{}
	for i, et := range doc.SourceEvents {
		p := fmt.Sprintf("source_events[%d]", i)
		switch {
		case !eventTypeRE.MatchString(et):
			c.Add(p, "%s is not a valid event type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(et))
		case listed[et]:
			c.Add(p, "duplicate event type %q", et)
		case len(doc.On) > 0:
			if _, ok := doc.On[et]; !ok {
				c.Add(p, "event type %q has no entry in on", et)
			}
		}
		listed[et] = true
	}
	if len(doc.On) == 0 {
		c.Add("on", "must define an operation for each source event")
	}
	for _, et := range docparse.SortedKeys(doc.On) {
		op := doc.On[et]
		base := "on." + et
		if !listed[et] {
			c.Add(base, "event type %q is not listed in source_events", et)
		}
		checkOperation(c, doc, base, op)
	}
}

func checkOperation(c *docparse.Checker, doc *Document, base string, op Operation) {
	for _, col := range docparse.SortedKeys(op.Columns) {
		c.Ident(base+".columns."+col, col)
	}
	for _, col := range docparse.SortedKeys(op.Increment) {
		c.Ident(base+".increment."+col, col)
	}
	missingKeys := func() {
		for _, k := range doc.Key {
			if _, ok := op.Columns[k]; !ok {
				c.Add(base+".columns", "missing key column %q", k)
			}
		}
	}
	switch op.Op {
	case OpUpsert:
		missingKeys()
		if len(op.Increment) > 0 {
			c.Add(base+".increment", "is only allowed with op increment")
		}
	case OpDelete:
		missingKeys()
		for _, col := range docparse.SortedKeys(op.Columns) {
			if !slices.Contains(doc.Key, col) {
				c.Add(base+".columns."+col, "delete takes key columns only")
			}
		}
		if len(op.Increment) > 0 {
			c.Add(base+".increment", "is only allowed with op increment")
		}
	case OpIncrement:
		missingKeys()
		if len(op.Increment) == 0 {
			c.Add(base+".increment", "must list at least one column to increment")
		}
		for _, col := range docparse.SortedKeys(op.Increment) {
			if slices.Contains(doc.Key, col) {
				c.Add(base+".increment."+col, "a key column cannot be incremented")
			} else if _, ok := op.Columns[col]; ok {
				c.Add(base+".increment."+col, "column is also set in columns")
			}
		}
	case "":
		c.Add(base+".op", "is required (upsert, delete or increment)")
	default:
		c.Add(base+".op", "unknown op %q (want upsert, delete or increment)", op.Op)
	}
}
