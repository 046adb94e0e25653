package celexpr

import (
	"math"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
)

// Report records one fault of the expression being compiled.
type Report func(format string, args ...any)

// Compile parses and type-checks src in env. A blank src or a CEL error is
// reported, and ok is false.
func Compile(env *cel.Env, src string, report Report) (checked *cel.Ast, ok bool) {
	if strings.TrimSpace(src) == "" {
		report("expression is empty")
		return nil, false
	}
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		report("CEL: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
		return nil, false
	}
	return checked, true
}

// Program plans checked. Unless o.RuntimeOnly, its worst-case cost over
// the inputs sizes bounds must stay under o.CostLimit. An evaluation is
// charged with DispatchCosts, fails past o.CostLimit and checks its context
// every InterruptCheckFrequency comprehension iterations. A fault is
// reported, and ok is false.
func Program(env *cel.Env, checked *cel.Ast, sizes cost.Estimator, o Options, report Report) (prg cel.Program, ok bool) {
	if !o.RuntimeOnly {
		est, err := env.EstimateCost(checked, sizes)
		switch {
		case err != nil:
			report("CEL cost estimate: %v", err)
			return nil, false
		case est.Max == math.MaxUint64:
			report("worst-case CEL cost is unbounded (cost limit %d)", o.CostLimit)
			return nil, false
		case est.Max > o.CostLimit:
			report("worst-case CEL cost %d exceeds the cost limit %d", est.Max, o.CostLimit)
			return nil, false
		}
	}
	prg, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(o.CostLimit),
		cel.CostTracking(DispatchCosts{}), cel.InterruptCheckFrequency(InterruptCheckFrequency))
	if err != nil {
		report("CEL: %v", err)
		return nil, false
	}
	return prg, true
}
