package intents

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/internal/celexpr"
	"github.com/causet/projection-retry/internal/docparse"
)

// Option configures validation (Parse, ParseFile, Validate, Deploy) and the
// catalog (NewCatalog, Compile).
type Option func(*celexpr.Options)

// WithCostLimit sets the CEL cost one evaluation of one expression may
// spend and the bound its worst-case estimate must stay under. 0 means
// celexpr.DefaultCostLimit.
func WithCostLimit(limit uint64) Option {
	return func(o *celexpr.Options) { o.CostLimit = limit }
}

var (
	keyEnv = sync.OnceValues(func() (*cel.Env, error) {
		return cel.NewEnv(cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)))
	})
	ruleEnv = sync.OnceValues(func() (*cel.Env, error) {
		return cel.NewEnv(
			cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("reads", cel.MapType(cel.StringType, cel.DynType)))
	})
)

// Handler is one version of a handler document, compiled.
type Handler struct {
	doc       *Document
	version   int
	costLimit uint64
	reads     []compiledRead
	rules     []compiledRule
	emits     []compiledEmit
	emitNeeds []int // reads loaded before the payloads are evaluated
}

// readIndexes returns the indexes in h.reads of the reads xs refer to.
// Reads are loaded only when a rule or payload that refers to them is
// about to run, so a rule that checks the payload can reject before a key
// built from it fails.
func (h *Handler) readIndexes(xs ...expr) []int {
	var out []int
	for i, rd := range h.reads {
		for _, x := range xs {
			if slices.Contains(x.reads, rd.name) {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

type expr struct {
	path  string // e.g. rules[0].reject_if
	prg   cel.Program
	reads []string // the reads it refers to
}

type compiledRead struct {
	name, table string
	cols        []string
	keys        []expr // in cols order
}

type compiledRule struct {
	name             string
	rejectIf, reason expr
	needs            []int // indexes in reads, loaded before the rule runs
}

type compiledEmit struct {
	eventType string
	fields    []string
	values    []expr // in fields order
}

// Compile validates doc and compiles it as deployed version version (0 for
// a document not deployed).
func Compile(doc *Document, version int, opts ...Option) (*Handler, error) {
	return compile(doc, version, celexpr.NewOptions(opts))
}

// IntentType is the type the handler decides.
func (h *Handler) IntentType() string { return h.doc.IntentType }

// Version is the deployed version (0 when not deployed).
func (h *Handler) Version() int { return h.version }

// Document is the handler's document; callers must not change it.
func (h *Handler) Document() *Document { return h.doc }

// EventTypes lists the event types the handler emits, in order.
func (h *Handler) EventTypes() []string {
	out := make([]string, len(h.emits))
	for i, e := range h.emits {
		out[i] = e.eventType
	}
	return out
}

func compile(doc *Document, version int, o celexpr.Options) (*Handler, error) {
	c := &docparse.Checker{}
	if doc == nil {
		c.Add("", "document is empty")
		return nil, docFormat.Err(c)
	}
	checkShape(c, doc)
	kenv, err := keyEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	renv, err := ruleEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	h := &Handler{doc: doc, version: version, costLimit: o.CostLimit}
	prog := func(env *cel.Env, path, src string, want ...string) expr {
		x, _ := compileExpr(c, env, path, src, doc, o, want)
		return x
	}
	for _, name := range docparse.SortedKeys(doc.Reads) {
		r := doc.Reads[name]
		cr := compiledRead{name: name, table: r.Table, cols: docparse.SortedKeys(r.Key)}
		for _, col := range cr.cols {
			cr.keys = append(cr.keys, prog(kenv, "reads."+name+".key."+col, r.Key[col]))
		}
		h.reads = append(h.reads, cr)
	}
	for i, r := range doc.Rules {
		base := fmt.Sprintf("rules[%d]", i)
		cr := compiledRule{name: r.Name,
			rejectIf: prog(renv, base+".reject_if", r.RejectIf, "bool"),
			reason:   prog(renv, base+".reason", r.Reason, "string")}
		cr.needs = h.readIndexes(cr.rejectIf, cr.reason)
		h.rules = append(h.rules, cr)
	}
	var all []expr
	for i, e := range doc.Emits {
		ce := compiledEmit{eventType: e.EventType, fields: docparse.SortedKeys(e.Payload)}
		for _, f := range ce.fields {
			x := prog(renv, fmt.Sprintf("emits[%d].payload.%s", i, f), e.Payload[f])
			ce.values = append(ce.values, x)
			all = append(all, x)
		}
		h.emits = append(h.emits, ce)
	}
	h.emitNeeds = h.readIndexes(all...)
	if err := docFormat.Err(c); err != nil {
		return nil, err
	}
	return h, nil
}

// compileExpr compiles one expression: its output type must be one of want
// (or dyn) when want is given, it may name only declared reads, and unless
// o.RuntimeOnly its worst-case cost must stay under the limit.
func compileExpr(c *docparse.Checker, env *cel.Env, path, src string, doc *Document, o celexpr.Options, want []string) (expr, bool) {
	report := func(f string, args ...any) { c.Add(path, f, args...) }
	checked, ok := celexpr.Compile(env, src, report)
	if !ok {
		return expr{}, false
	}
	if out := checked.OutputType().String(); len(want) > 0 && out != "dyn" && !slices.Contains(want, out) {
		c.Add(path, "expression has type %s, want %s", out, strings.Join(want, " or "))
		return expr{}, false
	}
	x := expr{path: path}
	for _, n := range ast.MatchDescendants(ast.NavigateAST(checked.NativeRep()), ast.KindMatcher(ast.IdentKind)) {
		if n.AsIdent() != "reads" {
			continue
		}
		parent, ok := n.Parent()
		if !ok || parent.Kind() != ast.SelectKind {
			x.reads = docparse.SortedKeys(doc.Reads) // reads as a whole
			continue
		}
		name := parent.AsSelect().FieldName()
		if !hasKey(doc.Reads, name) {
			c.Add(path, "reads.%s is not declared in reads", name)
			return expr{}, false
		}
		if !slices.Contains(x.reads, name) {
			x.reads = append(x.reads, name)
		}
	}
	if x.prg, ok = celexpr.Program(env, checked, inputSizes, o, report); !ok {
		return expr{}, false
	}
	return x, true
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// readSQL reads one row by key as JSON. Two rows are fetched so that a key
// matching several (which one would be arbitrary) is an error, not a guess.
func readSQL(table string, cols []string) string {
	conds := make([]string, len(cols))
	for i, col := range cols {
		conds[i] = fmt.Sprintf("%s = $%d", pgx.Identifier{col}.Sanitize(), i+1)
	}
	return fmt.Sprintf("SELECT to_jsonb(t)::text FROM %s AS t WHERE %s LIMIT 2",
		pgx.Identifier{table}.Sanitize(), strings.Join(conds, " AND "))
}

// inputSizes bounds every string, list and map reachable from intent (an
// intent body is at most 1 MiB) and from reads (a row is at most
// MaxRowBytes) at 1 MiB, so worst-case estimates are finite: field access,
// comparisons, arithmetic and concatenation pass; a comprehension over
// payload data or an operation costing the product of two input sizes does
// not. Like projection's estimate for event.
var inputSizes = celexpr.InputSizes{Vars: []string{"intent", "reads"}, Max: 1 << 20}
