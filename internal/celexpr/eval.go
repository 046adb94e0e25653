package celexpr

import (
	"context"
	"errors"
	"fmt"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// EvalError is an expression that failed to evaluate: a CEL error such as
// "division by zero", the cost limit, a value of the wrong type. Path names
// the expression in its document.
type EvalError struct {
	Path string // e.g. on.TRACK_PLAYED.columns.plays_per_day, rules[0].reason
	Err  error
}

func (e *EvalError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *EvalError) Unwrap() error { return e.Err }

// Eval evaluates prg, the expression at path planned with costLimit, with
// vars (a map or an interpreter.Activation). With useCtx the evaluation
// checks ctx in comprehensions; without, it is bounded by the cost limit
// alone, and faster. An evaluation that ctx stops returns ctx's error
// prefixed with path, not an *EvalError: the input is not at fault. Any
// other failure, including an error value, is an *EvalError.
func Eval(ctx context.Context, prg cel.Program, vars any, path string, costLimit uint64, useCtx bool) (ref.Val, error) {
	var out ref.Val
	var err error
	if useCtx {
		out, _, err = prg.ContextEval(ctx, vars)
	} else {
		out, _, err = prg.Eval(vars)
	}
	var cancel interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancel) && cancel.Cause == interpreter.CostLimitExceeded:
		return nil, &EvalError{Path: path, Err: fmt.Errorf("CEL cost limit %d exceeded", costLimit)}
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", path, ctx.Err())
	case err != nil:
		return nil, &EvalError{Path: path, Err: err}
	case types.IsError(out):
		if e, ok := out.Value().(error); ok {
			return nil, &EvalError{Path: path, Err: e}
		}
		return nil, &EvalError{Path: path, Err: errors.New(fmt.Sprint(out))}
	}
	return out, nil
}
