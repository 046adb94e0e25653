// Package activities implements ApplyProjection, PublishDeadLetter and
// AwaitRetrySettled.
package activities
