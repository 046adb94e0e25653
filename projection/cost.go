package projection

import (
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/celexpr"
)

// DefaultCostLimit is the CEL cost one evaluation of one expression may
// spend (config.DefaultIRCostLimit, CAUSET_IR_COST_LIMIT). Reaching it takes
// tens of milliseconds, far less than an apply's deadline; an evaluation past
// it fails its event as ir_eval.
const DefaultCostLimit = celexpr.DefaultCostLimit

// Option configures validation (Parse, ParseFile, Validate, Deploy) and the
// engine (NewEngine).
type Option func(*celexpr.Options)

// WithCostLimit sets the CEL cost one evaluation of one expression may spend
// and the bound the worst-case estimate must stay under. 0 means
// DefaultCostLimit.
func WithCostLimit(limit uint64) Option {
	return func(o *celexpr.Options) { o.CostLimit = limit }
}

// runtimeOnly skips the cost estimate: the engine compiles documents that
// were deployed (possibly under another limit, or before there was one) and
// relies on the limit at evaluation.
func runtimeOnly() Option { return func(o *celexpr.Options) { o.RuntimeOnly = true } }

// envelopeSizes gives the cost estimate the bounds of what event can hold.
// Everything in it comes from one record of at most event.MaxSize bytes, so
// no string, list or map in it is longer than that, a list holds at most
// half as many elements (each takes a value and a comma), and distinct
// fields concatenated are at most that long together. Estimates are then
// finite, and an expression is valid when its worst case over every
// envelope event.Decode accepts stays under the cost limit: field access,
// arithmetic, conversions, `in`, comparisons and concatenations pass; a
// comprehension over payload data (a list of half a million elements at
// worst) or an operation costing the product of two payload sizes
// (x.contains(y), x.matches(y)) does not, and nested comprehensions are far
// over.
var envelopeSizes = eventSizes{celexpr.InputSizes{Vars: []string{"event"}, Max: event.MaxSize}}

type eventSizes struct{ celexpr.InputSizes }

// EstimateCallCost bounds a concatenation of distinct fields of event by the
// record's size, and leaves the rest to celexpr.InputSizes.
func (s eventSizes) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	switch overloadID {
	case overloads.AddString, overloads.AddBytes, overloads.AddList:
		if len(args) != 2 {
			return nil
		}
		var c concat
		if !c.add(args[0].Expr()) || !c.add(args[1].Expr()) {
			return nil
		}
		size := cost.SizeEstimate{Min: c.literal, Max: c.literal}
		if len(c.fields) > 0 {
			size.Max += event.MaxSize
		}
		work := cost.FixedCostEstimate(1)
		if overloadID != overloads.AddList {
			work = size.MultiplyByCostFactor(cost.StringTraversalCostFactor)
		}
		return cost.NewCallEstimate(work, &size)
	}
	return s.InputSizes.EstimateCallCost(function, overloadID, target, args)
}

// concat collects the operands of a chain of + over literals and distinct,
// non-overlapping fields of event, whose sizes together are bounded by the
// record's.
type concat struct {
	fields  []string // field paths, each ending in a separator
	literal uint64   // total size of the literals
}

func (c *concat) add(e ast.Expr) bool {
	switch e.Kind() {
	case ast.LiteralKind:
		switch v := e.AsLiteral().(type) {
		case types.String:
			c.literal += uint64(utf8.RuneCountInString(string(v)))
			return true
		case types.Bytes:
			c.literal += uint64(len(v))
			return true
		}
		return false
	case ast.CallKind:
		call := e.AsCall()
		if call.FunctionName() != operators.Add || len(call.Args()) != 2 {
			return false
		}
		return c.add(call.Args()[0]) && c.add(call.Args()[1])
	case ast.SelectKind:
		var path []string
		for e.Kind() == ast.SelectKind && !e.AsSelect().IsTestOnly() {
			path = append(path, e.AsSelect().FieldName())
			e = e.AsSelect().Operand()
		}
		if e.Kind() != ast.IdentKind || e.AsIdent() != "event" {
			return false
		}
		var b strings.Builder
		for i := len(path) - 1; i >= 0; i-- {
			b.WriteString(path[i])
			b.WriteByte(0)
		}
		p := b.String()
		for _, f := range c.fields {
			if strings.HasPrefix(f, p) || strings.HasPrefix(p, f) {
				return false // the same bytes counted twice
			}
		}
		c.fields = append(c.fields, p)
		return true
	}
	return false
}
