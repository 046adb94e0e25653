// Package docparse holds what projection IR documents and intent handler
// documents share about their text: decoding YAML or JSON with unknown
// fields and type mismatches named by path (Parse, ParseFile, Format),
// scalar expressions taken as CEL literals (Literals), plain SQL
// identifiers (ValidIdentifier), and the problems a validation collects
// (Checker, Problem).
//
// Neighbours: a leaf. Package projection (IR documents) and package intents
// (handler documents) parse with it, so that the write path shares it
// rather than importing the projection engine; their CEL side is
// internal/celexpr. It imports no project package.
package docparse
