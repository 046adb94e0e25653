// Package celexpr holds what projection IR documents and intent handler
// documents share about their CEL expressions: the cost options, the
// worst-case cost estimate over inputs of bounded size, the run-time
// charging of calls on dyn operands, compiling and planning an expression,
// classifying evaluation failures, and converting results to Go and JSON
// values.
//
// Neighbours: a leaf. Package projection (IR expressions over event) and
// package intents (handler expressions over intent and reads) compile and
// evaluate with it; their document text is internal/docparse. It imports no
// project package.
package celexpr
