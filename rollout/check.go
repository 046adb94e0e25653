package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// Trier is what Check applies with; *projection.Engine is one.
type Trier interface {
	Try(ctx context.Context, candidate *projection.Document, evs []event.Envelope) ([]projection.Trial, error)
	Version(projection string) int
}

// Outcome is what a failing event would do under the candidate.
type Outcome string

const (
	// WouldApply: it applies (or has applied already: a duplicate).
	WouldApply Outcome = "would_apply"
	// StillFails: it fails with the candidate too.
	StillFails Outcome = "still_fails"
	// OutOfOrder: it would apply, but its entity applied a later event: a
	// replay is refused unless forced.
	OutOfOrder Outcome = "out_of_order"
	// NotHandled: the candidate does not handle its event type.
	NotHandled Outcome = "not_handled"
)

// Report is a check's answer.
type Report struct {
	Projection string `json:"projection"`
	// Deployed is the newest deployed version; the candidate was tried as
	// Deployed+1.
	Deployed int `json:"deployedVersion"`
	// Checked is how many failing events were tried; Truncated is set when
	// the limit left some out.
	Checked   int  `json:"checked"`
	Truncated bool `json:"truncated,omitempty"`
	// BySource counts the checked events by where they wait.
	BySource map[Source]int `json:"bySource"`
	// Totals counts them by outcome.
	Totals map[Outcome]int `json:"totals"`
	// Groups are the events by the fingerprint of the failure they wait
	// on, largest first.
	Groups []Group `json:"groups"`
	// DLQRecords and Superseded are Gathered's.
	DLQRecords int `json:"dlqRecords"`
	Superseded int `json:"supersededDlqRecords"`
	// Took is how long the check ran.
	Took time.Duration `json:"tookNs"`
	// Events is each checked event's outcome, in check order (not in the
	// JSON: its size is the check's).
	Events []EventOutcome `json:"-"`
}

// Group is the outcome of the events that fail with one fingerprint.
type Group struct {
	Fingerprint string          `json:"fingerprint"`
	ErrorKind   string          `json:"errorKind"`
	Error       string          `json:"error"`
	Events      int             `json:"events"`
	Outcomes    map[Outcome]int `json:"outcomes"`
	// StillFailing are the failures the candidate still meets, by their
	// own fingerprint, with a sample event.
	StillFailing []Failure `json:"stillFailing,omitempty"`
	// SampleEventID is one event of the group.
	SampleEventID string `json:"sampleEventId"`
}

// Failure is one way the candidate still fails.
type Failure struct {
	ErrorKind     string `json:"errorKind"`
	Error         string `json:"error"`
	Events        int    `json:"events"`
	SampleEventID string `json:"sampleEventId"`
}

// EventOutcome is one checked event.
type EventOutcome struct {
	Failing
	Outcome Outcome
	// Err is the candidate's failure (StillFails).
	Err *projection.ApplyError
}

// FailingShare is the share of checked events that still fail (0 when none
// were checked).
func (r Report) FailingShare() float64 {
	if r.Checked == 0 {
		return 0
	}
	return float64(r.Totals[StillFails]) / float64(r.Checked)
}

// Check tries candidate on the failing events and groups the outcomes by
// the fingerprint of the failure each waits on. It writes nothing.
func Check(ctx context.Context, t Trier, candidate *projection.Document, failing []Failing, g Gathered) (Report, error) {
	start := time.Now()
	r := Report{Projection: candidate.Name, Deployed: t.Version(candidate.Name), Checked: len(failing), Truncated: g.Truncated,
		BySource: map[Source]int{}, Totals: map[Outcome]int{}, DLQRecords: g.DLQRecords, Superseded: g.Superseded}
	evs := make([]event.Envelope, len(failing))
	for i, f := range failing {
		evs[i] = f.Event
		r.BySource[f.Source]++
	}
	trials, err := t.Try(ctx, candidate, evs)
	if err != nil && !errors.Is(err, projection.ErrTryCanceled) {
		return r, err
	}
	if err != nil {
		r.Checked, r.Truncated = len(trials), true
	}
	groups := map[string]*Group{}
	failures := map[string]map[string]*Failure{}
	for i, tr := range trials {
		f := failing[i]
		o := outcomeOf(f, tr)
		r.Totals[o]++
		r.Events = append(r.Events, EventOutcome{Failing: f, Outcome: o, Err: tr.Err})
		gr := groups[f.Fingerprint]
		if gr == nil {
			gr = &Group{Fingerprint: f.Fingerprint, ErrorKind: f.ErrorKind, Error: f.Error, Outcomes: map[Outcome]int{}, SampleEventID: f.Event.EventID}
			groups[f.Fingerprint] = gr
			failures[f.Fingerprint] = map[string]*Failure{}
		}
		gr.Events++
		gr.Outcomes[o]++
		if o == StillFails && tr.Err != nil {
			fp := incident.Of(candidate.Name, string(tr.Err.Kind), tr.Err).ID
			fl := failures[f.Fingerprint][fp]
			if fl == nil {
				fl = &Failure{ErrorKind: string(tr.Err.Kind), Error: tr.Err.Error(), SampleEventID: f.Event.EventID}
				failures[f.Fingerprint][fp] = fl
			}
			fl.Events++
		}
	}
	for id, gr := range groups {
		for _, fl := range failures[id] {
			gr.StillFailing = append(gr.StillFailing, *fl)
		}
		sort.Slice(gr.StillFailing, func(i, j int) bool { return gr.StillFailing[i].Events > gr.StillFailing[j].Events })
		r.Groups = append(r.Groups, *gr)
	}
	sortGroups(r.Groups)
	r.Took = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("check stopped after %d of %d events: %w", len(trials), len(failing), err)
	}
	return r, nil
}

// add adds the counts and groups of page, a report on more of the same
// check's events, to r.
func (r *Report) add(page Report) {
	r.Checked += page.Checked
	r.Truncated = r.Truncated || page.Truncated
	r.Took += page.Took
	if r.BySource == nil {
		r.BySource = map[Source]int{}
	}
	if r.Totals == nil {
		r.Totals = map[Outcome]int{}
	}
	for s, n := range page.BySource {
		r.BySource[s] += n
	}
	for o, n := range page.Totals {
		r.Totals[o] += n
	}
	at := map[string]int{}
	for i, g := range r.Groups {
		at[g.Fingerprint] = i
	}
	for _, g := range page.Groups {
		i, ok := at[g.Fingerprint]
		if !ok {
			at[g.Fingerprint] = len(r.Groups)
			r.Groups = append(r.Groups, g)
			continue
		}
		have := &r.Groups[i]
		have.Events += g.Events
		for o, n := range g.Outcomes {
			have.Outcomes[o] += n
		}
		same := map[string]int{}
		for j, f := range have.StillFailing {
			same[incident.Of(r.Projection, f.ErrorKind, errors.New(f.Error)).ID] = j
		}
		for _, f := range g.StillFailing {
			if j, ok := same[incident.Of(r.Projection, f.ErrorKind, errors.New(f.Error)).ID]; ok {
				have.StillFailing[j].Events += f.Events
			} else {
				have.StillFailing = append(have.StillFailing, f)
			}
		}
		sort.Slice(have.StillFailing, func(i, j int) bool { return have.StillFailing[i].Events > have.StillFailing[j].Events })
	}
	sortGroups(r.Groups)
}

// clone returns a copy of r that shares no map or slice with it.
func (r Report) clone() Report {
	r.BySource, r.Totals = maps.Clone(r.BySource), maps.Clone(r.Totals)
	r.Groups = slices.Clone(r.Groups)
	for i, g := range r.Groups {
		r.Groups[i].Outcomes = maps.Clone(g.Outcomes)
		r.Groups[i].StillFailing = slices.Clone(g.StillFailing)
	}
	r.Events = nil
	return r
}

func sortGroups(gs []Group) {
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Events != gs[j].Events {
			return gs[i].Events > gs[j].Events
		}
		return gs[i].Fingerprint < gs[j].Fingerprint
	})
}

func outcomeOf(f Failing, tr projection.Trial) Outcome {
	switch tr.Status {
	case projection.StatusFailed:
		return StillFails
	case projection.StatusSkipped:
		return NotHandled
	case projection.StatusApplied:
		// Only a replay is refused for order: parked and held events are
		// released in their entity's order, and a retrying run is no replay.
		if tr.Later != nil && f.Source == DeadLettered {
			return OutOfOrder
		}
	}
	return WouldApply
}
