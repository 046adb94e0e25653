// Package dlq holds the dead-letter record of causet.projection-dlq.v1, its
// publisher and its reader.
package dlq
