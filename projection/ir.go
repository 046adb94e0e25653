package projection

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

	"go.yaml.in/yaml/v3"
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

var (
	identRE     = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	eventTypeRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,200}$`)
)

// ValidIdentifier reports whether s is a plain SQL identifier as IR documents
// require: ^[a-z_][a-z0-9_]{0,62}$.
func ValidIdentifier(s string) bool { return identRE.MatchString(s) }

// Problem is one fault in a document, at a path such as
// "on.ARTIST_FOLLOWED.columns.followed_at".
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every fault found in a document.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid projection: " + strings.Join(lines, "; ")
}

// Parse decodes a YAML (1.2: `on` is a plain key) or JSON document, rejects
// unknown fields with their path, and validates it. Expressions written as
// YAML numbers, booleans or null (e.g. `plays: 1`) are taken as CEL literals.
// opts are Validate's.
func Parse(data []byte, opts ...Option) (*Document, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty projection document")
	}
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decode projection document: %w", err)
	}
	c := &checker{}
	norm := normalize(c, "", raw)
	if err := c.err(); err != nil {
		return nil, err
	}
	if _, ok := norm.(map[string]any); !ok {
		return nil, errors.New("decode projection document: not a mapping")
	}
	checkFields(c, norm.(map[string]any))
	if err := c.err(); err != nil {
		return nil, err
	}
	j, err := json.Marshal(norm)
	if err != nil {
		return nil, fmt.Errorf("decode projection document: %w", err)
	}
	var doc Document
	if err := json.Unmarshal(j, &doc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &ValidationError{Problems: []Problem{{Path: te.Field, Message: fmt.Sprintf("must be %s, not %s", friendlyType(te.Type.String()), te.Value)}}}
		}
		return nil, fmt.Errorf("decode projection document: %w", err)
	}
	if err := Validate(&doc, opts...); err != nil {
		return nil, err
	}
	return &doc, nil
}

func friendlyType(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int":
		return "an integer"
	case "[]string":
		return "a list of strings"
	case "map[string]string":
		return "a mapping of column to CEL expression"
	}
	return t
}

// normalize turns YAML values into JSON-encodable ones, failing on non-string
// keys.
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
			var ks string
			switch k.(type) {
			case string, int, int64, uint64, float64, bool:
				ks = fmt.Sprint(k) // like YAML-to-JSON converters do
			default:
				c.add(path, "key %v is not a string", k)
				continue
			}
			out[ks] = normalize(c, join(path, ks), x)
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
func checkFields(c *checker, m map[string]any) {
	top := []string{"name", "version", "source_events", "table", "key", "on"}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(top, k) {
			c.add(k, "unknown field (want one of %s)", strings.Join(top, ", "))
		}
	}
	on, _ := m["on"].(map[string]any)
	for _, et := range sortedKeys(on) {
		op, ok := on[et].(map[string]any)
		if !ok {
			continue
		}
		for _, k := range sortedKeys(op) {
			switch k {
			case "op":
			case "columns", "increment":
				exprs, _ := op[k].(map[string]any)
				for col, x := range exprs {
					switch x.(type) {
					case int, int64, uint64, float64, bool:
						exprs[col] = fmt.Sprint(x)
					case nil:
						exprs[col] = "null"
					}
				}
			default:
				c.add("on."+et+"."+k, "unknown field (want op, columns, increment)")
			}
		}
	}
}

// ParseFile reads and parses one document; errors name the file. opts are
// Validate's.
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

// Validate checks a document, compiling its CEL expressions. The error, a
// *ValidationError, names the path of every fault. An expression whose
// worst-case CEL cost over any valid envelope is unbounded or over the cost
// limit (WithCostLimit, default DefaultCostLimit) is a fault.
func Validate(doc *Document, opts ...Option) error {
	_, err := compile(doc, 0, opts...)
	return err
}

type checker struct{ problems []Problem }

func (c *checker) add(path, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) ident(path, s string) bool {
	if !identRE.MatchString(s) {
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
	if doc == nil {
		c.add("", "document is empty")
		return
	}
	if doc.Name == "" {
		c.add("name", "is required")
	} else {
		c.ident("name", doc.Name)
	}
	if doc.Version < 0 {
		c.add("version", "must not be negative")
	}
	if doc.Table == "" {
		c.add("table", "is required")
	} else {
		c.ident("table", doc.Table)
	}
	if len(doc.Key) == 0 {
		c.add("key", "must list at least one column")
	}
	seen := map[string]bool{}
	for i, k := range doc.Key {
		p := fmt.Sprintf("key[%d]", i)
		if c.ident(p, k) && seen[k] {
			c.add(p, "duplicate key column %q", k)
		}
		seen[k] = true
	}
	if len(doc.SourceEvents) == 0 {
		c.add("source_events", "must list at least one event type")
	}
	listed := map[string]bool{}
	for i, et := range doc.SourceEvents {
		p := fmt.Sprintf("source_events[%d]", i)
		switch {
		case !eventTypeRE.MatchString(et):
			c.add(p, "%s is not a valid event type (want ^[A-Za-z0-9_.:/-]{1,200}$)", strconv.Quote(et))
		case listed[et]:
			c.add(p, "duplicate event type %q", et)
		case len(doc.On) > 0:
			if _, ok := doc.On[et]; !ok {
				c.add(p, "event type %q has no entry in on", et)
			}
		}
		listed[et] = true
	}
	if len(doc.On) == 0 {
		c.add("on", "must define an operation for each source event")
	}
	for _, et := range sortedKeys(doc.On) {
		op := doc.On[et]
		base := "on." + et
		if !listed[et] {
			c.add(base, "event type %q is not listed in source_events", et)
		}
		checkOperation(c, doc, base, op)
	}
}

func checkOperation(c *checker, doc *Document, base string, op Operation) {
	for _, col := range sortedKeys(op.Columns) {
		c.ident(base+".columns."+col, col)
	}
	for _, col := range sortedKeys(op.Increment) {
		c.ident(base+".increment."+col, col)
	}
	missingKeys := func() {
		for _, k := range doc.Key {
			if _, ok := op.Columns[k]; !ok {
				c.add(base+".columns", "missing key column %q", k)
			}
		}
	}
	switch op.Op {
	case OpUpsert:
		missingKeys()
		if len(op.Increment) > 0 {
			c.add(base+".increment", "is only allowed with op increment")
		}
	case OpDelete:
		missingKeys()
		for _, col := range sortedKeys(op.Columns) {
			if !slices.Contains(doc.Key, col) {
				c.add(base+".columns."+col, "delete takes key columns only")
			}
		}
		if len(op.Increment) > 0 {
			c.add(base+".increment", "is only allowed with op increment")
		}
	case OpIncrement:
		missingKeys()
		if len(op.Increment) == 0 {
			c.add(base+".increment", "must list at least one column to increment")
		}
		for _, col := range sortedKeys(op.Increment) {
			if slices.Contains(doc.Key, col) {
				c.add(base+".increment."+col, "a key column cannot be incremented")
			} else if _, ok := op.Columns[col]; ok {
				c.add(base+".increment."+col, "column is also set in columns")
			}
		}
	case "":
		c.add(base+".op", "is required (upsert, delete or increment)")
	default:
		c.add(base+".op", "unknown op %q (want upsert, delete or increment)", op.Op)
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
