package config

import (
	"fmt"
	"time"
)

// IncidentPolicy is what becomes of the events of an open incident
// (CAUSET_INCIDENT_POLICY).
type IncidentPolicy string

const (
	// IncidentDeadLetter keeps every event on its own schedule and DLQ
	// record; the incident only reports the failure once.
	IncidentDeadLetter IncidentPolicy = "dead-letter"
	// IncidentHold parks the incident's events (and their entities' later
	// ones) in PostgreSQL, without attempts or DLQ records, until the
	// incident resolves; then they are applied in entity order.
	IncidentHold IncidentPolicy = "hold"
)

// Incident defaults. Twenty distinct failing events of one fingerprint in a
// minute is a rate no single bad event reaches (its own attempts count once)
// while a schema mismatch at even one event a second opens the incident in
// twenty seconds, before the first of those events has run its schedule.
const (
	DefaultIncidentThreshold = 20
	DefaultIncidentWindow    = time.Minute
	DefaultIncidentPolicy    = IncidentDeadLetter
	// A hold lasts at most a day and a million events: past either its
	// events are dead-lettered, so a hold nobody resolves ends as the seed's
	// dead letters would, only later.
	DefaultIncidentHoldMax = 24 * time.Hour
	DefaultIncidentMaxHeld = 1_000_000
)

// Incidents is the detection of systemic failures.
type Incidents struct {
	// Threshold is the number of distinct failing events of one fingerprint
	// within Window that opens an incident (CAUSET_INCIDENT_THRESHOLD).
	Threshold int
	// Window is the sliding window of the count (CAUSET_INCIDENT_WINDOW).
	Window time.Duration
	// Policy is CAUSET_INCIDENT_POLICY.
	Policy IncidentPolicy
	// HoldMax bounds how long a hold lasts (CAUSET_INCIDENT_HOLD_MAX);
	// MaxHeld how many events it parks (CAUSET_INCIDENT_MAX_HELD). Past
	// either, its held events are dead-lettered.
	HoldMax time.Duration
	MaxHeld int
}

// LoadIncidents reads CAUSET_INCIDENT_*. Holding needs the entity ordering
// and inline attempts: parked events are released in entity order behind
// their key's block, and only the bridge's inline attempt sees a failure
// before a workflow exists for it.
func LoadIncidents(lookup Lookup, mode Mode, ordering Ordering) (Incidents, error) {
	p := parser{lookup: lookup}
	in := Incidents{
		Threshold: p.intRange("CAUSET_INCIDENT_THRESHOLD", DefaultIncidentThreshold, 2, 10_000,
			"an integer from 2 to 10000 (distinct failing events of one fingerprint within CAUSET_INCIDENT_WINDOW)"),
		Window:  p.duration("CAUSET_INCIDENT_WINDOW", DefaultIncidentWindow),
		Policy:  IncidentPolicy(p.oneOf("CAUSET_INCIDENT_POLICY", string(DefaultIncidentPolicy), string(IncidentDeadLetter), string(IncidentHold))),
		HoldMax: p.duration("CAUSET_INCIDENT_HOLD_MAX", DefaultIncidentHoldMax),
		MaxHeld: p.intRange("CAUSET_INCIDENT_MAX_HELD", DefaultIncidentMaxHeld, 1, 100_000_000,
			"an integer from 1 to 100000000 (events one incident holds)"),
	}
	if p.err != nil {
		return Incidents{}, p.err
	}
	if in.Window < time.Second || in.Window > time.Hour {
		return Incidents{}, fmt.Errorf("CAUSET_INCIDENT_WINDOW=%s is invalid: want a duration from 1s to 1h", in.Window)
	}
	if in.Policy == IncidentHold && (mode != ModeInline || ordering != OrderingEntity) {
		return Incidents{}, fmt.Errorf("CAUSET_INCIDENT_POLICY=hold needs CAUSET_BRIDGE_MODE=inline and CAUSET_ORDERING=entity (have %s and %s): parked events are released in entity order behind their key's block", mode, ordering)
	}
	return in, nil
}
