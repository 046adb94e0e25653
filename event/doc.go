// Package event decodes and validates the Causet event envelope carried as
// the value of records on the events topic.
package event
