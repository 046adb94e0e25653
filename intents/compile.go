package intents

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/projection"
)

// interruptCheckFrequency is how many comprehension iterations run between
// checks of the caller's context.
const interruptCheckFrequency = 100

// Option configures validation (Parse, ParseFile, Validate, Deploy) and the
// catalog (NewCatalog, Compile).
type Option func(*options)

type options struct {
	costLimit uint64
	// runtimeOnly skips the cost estimate: a deployed version was checked
	// when it was deployed (perhaps under another limit), and the limit
	// still bounds every evaluation.
	runtimeOnly bool
}

// WithCostLimit sets the CEL cost one evaluation of one expression may
// spend and the bound its worst-case estimate must stay under. 0 means
// projection.DefaultCostLimit.
func WithCostLimit(limit uint64) Option {
	return func(o *options) { o.costLimit = limit }
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.costLimit == 0 {
		o.costLimit = projection.DefaultCostLimit
	}
	return o
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
	return compile(doc, version, newOptions(opts))
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

func compile(doc *Document, version int, o options) (*Handler, error) {
	c := &checker{}
	if doc == nil {
		c.add("", "document is empty")
		return nil, c.err()
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
	h := &Handler{doc: doc, version: version, costLimit: o.costLimit}
	prog := func(env *cel.Env, path, src string, want ...string) expr {
		x, _ := compileExpr(c, env, path, src, doc, o, want)
		return x
	}
	for _, name := range sortedKeys(doc.Reads) {
		r := doc.Reads[name]
		cr := compiledRead{name: name, table: r.Table, cols: sortedKeys(r.Key)}
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
		ce := compiledEmit{eventType: e.EventType, fields: sortedKeys(e.Payload)}
		for _, f := range ce.fields {
			x := prog(renv, fmt.Sprintf("emits[%d].payload.%s", i, f), e.Payload[f])
			ce.values = append(ce.values, x)
			all = append(all, x)
		}
		h.emits = append(h.emits, ce)
	}
	h.emitNeeds = h.readIndexes(all...)
	if err := c.err(); err != nil {
		return nil, err
	}
	return h, nil
}

// compileExpr compiles one expression: its output type must be one of want
// (or dyn) when want is given, it may name only declared reads, and unless
// o.runtimeOnly its worst-case cost must stay under the limit.
func compileExpr(c *checker, env *cel.Env, path, src string, doc *Document, o options, want []string) (expr, bool) {
	if strings.TrimSpace(src) == "" {
		c.add(path, "expression is empty")
		return expr{}, false
	}
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		c.add(path, "CEL: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
		return expr{}, false
	}
	if out := checked.OutputType().String(); len(want) > 0 && out != "dyn" && !slices.Contains(want, out) {
		c.add(path, "expression has type %s, want %s", out, strings.Join(want, " or "))
		return expr{}, false
	}
	x := expr{path: path}
	for _, n := range ast.MatchDescendants(ast.NavigateAST(checked.NativeRep()), ast.KindMatcher(ast.IdentKind)) {
		if n.AsIdent() != "reads" {
			continue
		}
		parent, ok := n.Parent()
		if !ok || parent.Kind() != ast.SelectKind {
			x.reads = sortedKeys(doc.Reads) // reads as a whole
			continue
		}
		name := parent.AsSelect().FieldName()
		if !hasKey(doc.Reads, name) {
			c.add(path, "reads.%s is not declared in reads", name)
			return expr{}, false
		}
		if !slices.Contains(x.reads, name) {
			x.reads = append(x.reads, name)
		}
	}
	if !o.runtimeOnly {
		est, err := env.EstimateCost(checked, inputSizes{})
		switch {
		case err != nil:
			c.add(path, "CEL cost estimate: %v", err)
			return expr{}, false
		case est.Max == math.MaxUint64:
			c.add(path, "worst-case CEL cost is unbounded (cost limit %d)", o.costLimit)
			return expr{}, false
		case est.Max > o.costLimit:
			c.add(path, "worst-case CEL cost %d exceeds the cost limit %d", est.Max, o.costLimit)
			return expr{}, false
		}
	}
	prg, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(o.costLimit),
		cel.CostTracking(dispatchCosts{}), cel.InterruptCheckFrequency(interruptCheckFrequency))
	if err != nil {
		c.add(path, "CEL: %v", err)
		return expr{}, false
	}
	x.prg = prg
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

// maxInputBytes bounds every string, list and map reachable from intent (an
// intent body is at most 1 MiB) and from reads (a row is at most
// MaxRowBytes), so worst-case estimates are finite: field access,
// comparisons, arithmetic and concatenation pass; a comprehension over
// payload data or an operation costing the product of two input sizes does
// not. Like projection's estimate for event.
const maxInputBytes = 1 << 20

type inputSizes struct{}

func fromInput(n cost.AstNode) bool {
	p := n.Path()
	return len(p) > 0 && (p[0] == "intent" || p[0] == "reads")
}

func (inputSizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if fromInput(n) {
		return &cost.SizeEstimate{Max: maxInputBytes}
	}
	return nil
}

func (inputSizes) EstimateCallCost(_, overloadID string, _ *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	// One per element; a dyn operand is otherwise sized for a string.
	if overloadID == overloads.InList && len(args) == 2 && fromInput(args[1]) {
		return cost.NewCallEstimate(cost.Estimate{Max: maxInputBytes / 2}, nil)
	}
	return nil
}

var standardTrackers = cost.StandardOverloadTrackers()

// dispatchCosts charges a call that dispatches at run time on dyn operands
// (every value from intent and reads is dyn) as the overload it dispatches
// to, as projection's engine does: otherwise dyn + dyn would cost 1 however
// long the strings it copies.
type dispatchCosts struct{}

func (dispatchCosts) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if overloadID != "" || len(args) == 0 {
		return nil
	}
	var id string
	switch function {
	case operators.Add:
		id = byKind(args[0], overloads.AddString, overloads.AddBytes)
	case operators.Less:
		id = byKind(args[0], overloads.LessString, overloads.LessBytes)
	case operators.LessEquals:
		id = byKind(args[0], overloads.LessEqualsString, overloads.LessEqualsBytes)
	case operators.Greater:
		id = byKind(args[0], overloads.GreaterString, overloads.GreaterBytes)
	case operators.GreaterEquals:
		id = byKind(args[0], overloads.GreaterEqualsString, overloads.GreaterEqualsBytes)
	case operators.In:
		if _, ok := args[len(args)-1].(traits.Lister); ok {
			id = overloads.InList
		}
	}
	if track := standardTrackers[id]; track != nil {
		return track(args, result)
	}
	return nil
}

func byKind(v ref.Val, str, byt string) string {
	switch v.(type) {
	case types.String:
		return str
	case types.Bytes:
		return byt
	}
	return ""
}
