package celexpr

import (
	"slices"

	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// InputSizes gives the cost estimate the bound of the inputs: no string,
// list or map reachable from the variables Vars is longer than Max, and a
// list holds at most Max/2 elements (each takes a value and a comma in the
// JSON it comes from). Estimates are then finite: field access,
// comparisons, arithmetic, `in` and concatenation pass; a comprehension over
// input data or an operation costing the product of two input sizes does
// not.
type InputSizes struct {
	Vars []string
	Max  uint64
}

// FromInput reports whether n is reached from one of s.Vars.
func (s InputSizes) FromInput(n cost.AstNode) bool {
	p := n.Path()
	return len(p) > 0 && slices.Contains(s.Vars, p[0])
}

// EstimateSize bounds a value from the inputs at s.Max.
func (s InputSizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if s.FromInput(n) {
		return &cost.SizeEstimate{Max: s.Max}
	}
	return nil
}

// EstimateCallCost charges `in` over an input list one per element; a dyn
// operand is otherwise sized for a string.
func (s InputSizes) EstimateCallCost(_, overloadID string, _ *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	if overloadID == overloads.InList && len(args) == 2 && s.FromInput(args[1]) {
		return cost.NewCallEstimate(cost.Estimate{Max: s.Max / 2}, nil)
	}
	return nil
}

var standardTrackers = cost.StandardOverloadTrackers()

// DispatchCosts charges a call the checker left to dispatch at run time, as
// it does with dyn operands (every value from the inputs is dyn), as the
// overload it dispatches to: otherwise dyn + dyn costs 1 however long the
// strings it copies.
type DispatchCosts struct{}

// CallCost implements cost.ActualCostEstimator.
func (DispatchCosts) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
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
	case overloads.TypeConvertBytes:
		id = byKind(args[0], overloads.StringToBytes, "")
	case overloads.TypeConvertString:
		id = byKind(args[0], "", overloads.BytesToString)
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
