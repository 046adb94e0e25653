// Package celexpr holds what projection IR documents and intent handler
// documents share about their CEL expressions: the cost options, the
// worst-case cost estimate over inputs of bounded size, the run-time
// charging of calls on dyn operands, compiling and planning an expression,
// classifying evaluation failures, and converting results to Go and JSON
// values.
package celexpr
