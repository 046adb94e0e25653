package rollout

import (
	"context"
	"errors"
	"fmt"
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
	sort.Slice(r.Groups, func(i, j int) bool {
		if r.Groups[i].Events != r.Groups[j].Events {
			return r.Groups[i].Events > r.Groups[j].Events
		}
		return r.Groups[i].Fingerprint < r.Groups[j].Fingerprint
	})
	r.Took = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("check stopped after %d of %d events: %w", len(trials), len(failing), err)
	}
	return r, nil
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
