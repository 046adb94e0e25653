package docparse

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

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidIdentifier reports whether s is a plain SQL identifier:
// ^[a-z_][a-z0-9_]{0,62}$.
func ValidIdentifier(s string) bool { return identRE.MatchString(s) }

// Problem is one fault in a document, at a path such as
// "on.ARTIST_FOLLOWED.columns.followed_at" or "rules[0].reject_if".
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

// Checker collects the problems of one document.
type Checker struct {
	Problems []Problem
}

// Add records a problem at path.
func (c *Checker) Add(path, format string, args ...any) {
	c.Problems = append(c.Problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Ident reports whether s is a plain SQL identifier, recording a problem at
// path when it is not.
func (c *Checker) Ident(path, s string) bool {
	if !ValidIdentifier(s) {
		c.Add(path, "%s is not a plain SQL identifier (want ^[a-z_][a-z0-9_]{0,62}$)", strconv.Quote(s))
		return false
	}
	return true
}

// Known records every key of m, the mapping at path, that is not one of
// fields as an unknown field.
func (c *Checker) Known(path string, m map[string]any, fields ...string) {
	for _, k := range SortedKeys(m) {
		if !slices.Contains(fields, k) {
			c.Add(join(path, k), "unknown field (want one of %s)", strings.Join(fields, ", "))
		}
	}
}

// Literals rewrites the YAML numbers, booleans and nulls among the values of
// v, a mapping of expressions (only those of keys, when given), as CEL
// literals.
func Literals(v any, keys ...string) {
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

// SortedKeys returns the keys of m, sorted.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Format is one kind of document.
type Format struct {
	// Kind names the document in errors: "projection", "intent handler".
	Kind string
	// Fields checks the decoded top-level mapping before it is decoded into
	// the document: unknown fields (Checker.Known), and expressions written
	// as YAML scalars (Literals).
	Fields func(c *Checker, top map[string]any)
	// Types names Go types in a type mismatch ("must be a list of strings,
	// not number"), beside string and int.
	Types map[string]string
	// Invalid wraps the problems found in the kind's *ValidationError.
	Invalid func([]Problem) error
}

// Message is the message of a validation error: "invalid <kind>: " and the
// problems.
func (f Format) Message(problems []Problem) string {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.String()
	}
	return "invalid " + f.Kind + ": " + strings.Join(lines, "; ")
}

// Err returns the problems of c as a validation error, or nil if there are
// none.
func (f Format) Err(c *Checker) error {
	if len(c.Problems) == 0 {
		return nil
	}
	return f.Invalid(c.Problems)
}

// Parse decodes data, a YAML (1.2) or JSON document, into a new D and
// validates it with validate. Non-string keys, what f.Fields finds and a
// value of the wrong type are validation errors naming their path; scalar
// keys are taken as strings, as YAML-to-JSON converters do.
func Parse[D any](f Format, data []byte, validate func(*D) error) (*D, error) {
	doc := new(D)
	if err := f.decode(data, doc); err != nil {
		return nil, err
	}
	if err := validate(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func (f Format) decode(data []byte, doc any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("empty %s document", f.Kind)
	}
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("decode %s document: %w", f.Kind, err)
	}
	c := &Checker{}
	top, ok := normalize(c, "", raw).(map[string]any)
	if err := f.Err(c); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("decode %s document: not a mapping", f.Kind)
	}
	f.Fields(c, top)
	if err := f.Err(c); err != nil {
		return err
	}
	j, err := json.Marshal(top)
	if err != nil {
		return fmt.Errorf("decode %s document: %w", f.Kind, err)
	}
	if err := json.Unmarshal(j, doc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return f.Invalid([]Problem{{Path: te.Field, Message: fmt.Sprintf("must be %s, not %s", f.typeName(te.Type.String()), te.Value)}})
		}
		return fmt.Errorf("decode %s document: %w", f.Kind, err)
	}
	return nil
}

func (f Format) typeName(t string) string {
	if s, ok := f.Types[t]; ok {
		return s
	}
	switch t {
	case "string":
		return "a string"
	case "int":
		return "an integer"
	}
	return t
}

// ParseFile reads the document at path and parses it with parse; errors
// name the file.
func ParseFile[D any](path string, parse func([]byte) (D, error)) (D, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var zero D
		return zero, err
	}
	doc, err := parse(data)
	if err != nil {
		var zero D
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// normalize turns YAML values into JSON-encodable ones, taking scalar keys
// as strings and recording other keys as problems.
func normalize(c *Checker, path string, v any) any {
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
				c.Add(path, "key %v is not a string", k)
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
