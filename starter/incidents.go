package starter

import (
	"time"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// The bridge's incidents (CONTRACT §12) are kept by an incident.Registry:
// these are the bridge's ends of it.

// failureOf is a failed pair as the incident registry knows failures.
func failureOf(o projection.Result, env *event.Envelope) incident.Failure {
	return incident.Failure{Projection: o.Projection, Kind: kindOf(o), Err: errOf(o), Event: env}
}

// holdingOf is the holding incident a pair's failure belongs to, "" when
// it did not fail or belongs to none.
func (b *Bridge) holdingOf(o projection.Result, env *event.Envelope) string {
	if o.Status != projection.StatusFailed {
		return ""
	}
	return b.inc.HoldingOf(failureOf(o, env))
}

// noteFailure counts a failure handed off the normal way towards its
// fingerprint's incident.
func (b *Bridge) noteFailure(o projection.Result, env *event.Envelope) {
	b.inc.Note(failureOf(o, env), time.Now())
}

// irVersion is the projection's IR version in the engine's cache, 0 when
// the engine does not say.
func (b *Bridge) irVersion(projection string) int {
	if v, ok := b.opts.Engine.(interface{ Version(string) int }); ok {
		return v.Version(projection)
	}
	return 0
}
