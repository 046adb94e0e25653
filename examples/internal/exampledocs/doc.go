// Package exampledocs reads the example documents a package embeds, one
// NAME.yaml per example: Names lists them, sorted, and Document reads one.
//
// Neighbours: the two example packages above it, examples/projections and
// examples/intents, use it; it imports no project package.
package exampledocs
