package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
)

// Source is where a failing event waits.
type Source string

const (
	// DeadLettered: its retry run was dead-lettered (open in its replay
	// window, or closed with its record still on the DLQ topic).
	DeadLettered Source = "dead_lettered"
	// Held: parked behind a holding incident (CAUSET_INCIDENT_POLICY=hold).
	Held Source = "held"
	// Parked: parked behind an earlier event of its entity that failed
	// (CAUSET_ORDERING=entity).
	Parked Source = "parked"
	// Retrying: its retry run is running its schedule (or held by an
	// incident after it).
	Retrying Source = "retrying"
)

// Failing is one event of the projection that is failing now.
type Failing struct {
	Source Source
	Event  event.Envelope
	// WorkflowID is the event's retry run (dead-lettered, retrying) or the
	// head it is parked behind (parked, held).
	WorkflowID string
	// ErrorKind and Error are the failure it waits on: its own, or its
	// head's for a parked event.
	ErrorKind, Error string
	// Fingerprint groups failures as incidents do (incident.Of).
	Fingerprint string
	// Item is the DLQ record of a dead letter, what a replay needs; nil
	// for other sources and for dead letters known to Temporal only.
	Item *dlq.Item
}

// Sources are where Gather looks.
type Sources struct {
	// Pool reads parked and held events. Required.
	Pool *pgxpool.Pool
	// Temporal lists retry runs and reads the input of runs whose event no
	// DLQ record carries. Required.
	Temporal client.Client
	// Namespace is the client's namespace. Required.
	Namespace string
	// TaskQueue is CAUSET_TASK_QUEUE: only this deployment's runs count.
	TaskQueue string
	// DLQ reads the dead-letter topic (Brokers, Topic, ClientOpts); its
	// Filter and Start are set by Gather. Nil: Temporal's dead letters only.
	DLQ *dlq.ReaderOptions
	// DataConverter decodes workflow inputs (payload encryption encrypts
	// them). Optional, defaults to the SDK's.
	DataConverter converter.DataConverter
}

// Gathered counts what Gather saw, beside the events it returns.
type Gathered struct {
	// DLQRecords is how many records of the projection the topic held;
	// Superseded of them were older records of a run with a newer one, or
	// of runs that have since succeeded or been discarded.
	DLQRecords, Superseded int
	// Truncated is set when Limit cut the list.
	Truncated bool
}

// maxHistoryReads bounds the workflow histories read at once.
const maxHistoryReads = 16

// Gather lists the events of projection that are failing now, at most
// limit of them: dead letters (newest record per run), then held, parked
// and retrying events, each source in its own order (DLQ offset, parking
// sequence, run start). It reads only.
func Gather(ctx context.Context, s Sources, projection string, limit int) ([]Failing, Gathered, error) {
	var g Gathered
	if s.DataConverter == nil {
		s.DataConverter = converter.GetDefaultDataConverter()
	}
	runs, cut, err := listRuns(ctx, s, projection, fmt.Sprintf("(ExecutionStatus = 'Running' OR %s IN ('%s', '%s'))",
		contract.AttrRetryState.GetName(), contract.StateSucceeded, contract.StateDiscarded))
	if err != nil {
		return nil, g, err
	}
	g.Truncated = cut
	var out []Failing
	// A run on its schedule has no error kind yet (its memo gets one when it
	// is dead-lettered): it takes the kind of a dead letter with its error.
	kindOf := map[string]string{}
	add := func(f Failing) bool {
		if len(out) >= limit {
			g.Truncated = true
			return false
		}
		pattern := incident.Pattern(f.Error)
		if f.ErrorKind == "" {
			f.ErrorKind = kindOf[pattern]
		} else if kindOf[pattern] == "" {
			kindOf[pattern] = f.ErrorKind
		}
		f.Fingerprint = incident.Of(projection, f.ErrorKind, errors.New(f.Error)).ID
		out = append(out, f)
		return true
	}

	// Dead letters on the topic: the newest record of each run whose run is
	// not settled (succeeded, discarded) and not running its schedule again.
	fromTopic := map[string]Failing{}
	if s.DLQ != nil {
		recs, n, err := readDLQ(ctx, *s.DLQ, projection)
		if err != nil {
			return nil, g, err
		}
		g.DLQRecords = n
		for _, it := range recs {
			id, _ := dlq.WorkflowID(it.Record)
			r, listed := runs[id]
			if listed && r.state != contract.StateDeadLettered {
				g.Superseded++
				continue
			}
			ev, err := it.Record.Envelope()
			if err != nil {
				continue // an invalid event: no IR version can apply it
			}
			item := it
			f := Failing{Source: DeadLettered, Event: ev, WorkflowID: id, ErrorKind: it.Record.ErrorKind, Error: it.Record.Error, Item: &item}
			fromTopic[id] = f
			if !add(f) {
				return out, g, nil
			}
		}
		g.Superseded += n - len(recs)
	}

	// Parked and held events, in parking order.
	parked, err := readParked(ctx, s.Pool, projection, limit+1)
	if err != nil {
		return nil, g, err
	}
	for _, p := range parked {
		f := Failing{Source: Parked, Event: p.in.Event, WorkflowID: p.head}
		switch {
		case strings.HasPrefix(p.head, "projection-incident:"):
			f.Source, f.ErrorKind, f.Error = Held, p.incidentKind, p.incidentError
		case fromTopic[p.head].Error != "":
			// Behind a dead letter: its record's whole error.
			f.ErrorKind, f.Error = fromTopic[p.head].ErrorKind, fromTopic[p.head].Error
		case runs[p.head].err != "":
			f.ErrorKind, f.Error = runs[p.head].kind, runs[p.head].err
		default:
			f.ErrorKind, f.Error = "parked", "behind "+p.head
		}
		if !add(f) {
			return out, g, nil
		}
	}

	// Runs whose event no record carried: read from their input.
	var need []string
	for id, r := range runs {
		if _, ok := fromTopic[id]; ok && r.state == contract.StateDeadLettered {
			continue
		}
		if r.state == contract.StateSucceeded || r.state == contract.StateDiscarded || !r.open {
			continue
		}
		need = append(need, id)
	}
	sort.Slice(need, func(i, j int) bool { return runs[need[i]].started < runs[need[j]].started })
	if room := limit - len(out); len(need) > room {
		need, g.Truncated = need[:max(room, 0)], true
	}
	inputs := make([]contract.RetryInput, len(need))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(maxHistoryReads)
	for i, id := range need {
		eg.Go(func() error {
			in, err := runInput(ectx, s, id, runs[id].runID)
			inputs[i] = in
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, g, err
	}
	for i, id := range need {
		r := runs[id]
		src := Retrying
		if r.state == contract.StateDeadLettered {
			src = DeadLettered
		}
		add(Failing{Source: src, Event: inputs[i].Event, WorkflowID: id, ErrorKind: r.kind, Error: r.err})
	}
	return out, g, nil
}

// run is one retry run of the projection as visibility lists it.
type run struct {
	runID   string
	open    bool
	state   contract.State
	kind    string // from the memo (dead-lettered runs); else "" until known
	err     string // CausetError
	started int64
	// deadLetteredAt is when a dead-lettered run was (its memo).
	deadLetteredAt time.Time
}

// maxListedRuns bounds the runs a check lists (a page is 1,000): past it
// the check says it was cut.
const maxListedRuns = 200_000

// listRuns lists the projection's retry runs that match where, at most
// maxListedRuns (cut is set when there were more). A check lists the open
// ones (dead-lettered, retrying, held, replaying) and the closed ones that
// settled their event (succeeded, discarded), which make older DLQ records
// moot.
func listRuns(ctx context.Context, s Sources, projection, where string) (out map[string]run, cut bool, err error) {
	q := fmt.Sprintf("WorkflowType = '%s' AND %s = '%s' AND %s",
		contract.RetryWorkflowName, contract.AttrProjection.GetName(), escape(projection), where)
	if s.TaskQueue != "" {
		q += fmt.Sprintf(" AND TaskQueue = '%s'", escape(s.TaskQueue))
	}
	if s.DataConverter == nil {
		s.DataConverter = converter.GetDefaultDataConverter()
	}
	out = map[string]run{}
	var token []byte
	for listed := 0; ; {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Namespace, Query: q, PageSize: 1000, NextPageToken: token,
		})
		if err != nil {
			return nil, false, fmt.Errorf("list the retry runs of %s: %w", projection, err)
		}
		listed += len(resp.GetExecutions())
		for _, e := range resp.GetExecutions() {
			r := run{runID: e.GetExecution().GetRunId(), open: e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
				started: e.GetStartTime().AsTime().UnixNano()}
			fields := e.GetSearchAttributes().GetIndexedFields()
			var v string
			if p := fields[contract.AttrRetryState.GetName()]; p != nil && s.DataConverter.FromPayload(p, &v) == nil {
				r.state = contract.State(v)
			}
			if p := fields[contract.AttrError.GetName()]; p != nil && s.DataConverter.FromPayload(p, &v) == nil {
				r.err = v
			}
			if p := e.GetMemo().GetFields()[contract.MemoErrorKind]; p != nil && s.DataConverter.FromPayload(p, &v) == nil {
				r.kind = v
			}
			if p := e.GetMemo().GetFields()[contract.MemoDeadLetteredAt]; p != nil {
				_ = s.DataConverter.FromPayload(p, &r.deadLetteredAt)
			}
			id := e.GetExecution().GetWorkflowId()
			// One run per ID: an open run wins over a closed earlier one.
			if old, ok := out[id]; !ok || !old.open {
				out[id] = r
			}
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, false, nil
		}
		if listed >= maxListedRuns {
			return out, true, nil
		}
	}
}

func escape(s string) string { return strings.ReplaceAll(s, "'", "\\'") }

// readDLQ reads the projection's records on the topic and keeps the newest
// of each run, in topic order; n is how many records it read.
func readDLQ(ctx context.Context, o dlq.ReaderOptions, projection string) ([]dlq.Item, int, error) {
	o.Filter = dlq.Filter{Projection: projection}
	o.Start, o.Follow = dlq.FromStart(), false
	r, err := dlq.NewReader(ctx, o)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	var items []dlq.Item
	newest := map[string]int{}
	n := 0
	err = r.Read(ctx, func(it dlq.Item) error {
		if it.Err != nil {
			return nil
		}
		n++
		id, err := dlq.WorkflowID(it.Record)
		if err != nil {
			return nil
		}
		if i, ok := newest[id]; ok && !it.Record.DeadLetteredAt.Before(items[i].Record.DeadLetteredAt) {
			items[i] = it
			return nil
		} else if ok {
			return nil
		}
		newest[id] = len(items)
		items = append(items, it)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return items, n, nil
}

type parkedEvent struct {
	in                          contract.RetryInput
	head                        string
	incidentKind, incidentError string
}

// readParked reads the projection's parked events with their heads, in
// parking order; a head that is an incident comes with its error.
func readParked(ctx context.Context, pool *pgxpool.Pool, projection string, limit int) ([]parkedEvent, error) {
	rows, err := pool.Query(ctx, `SELECT p.retry, k.head_workflow_id,
	COALESCE(i.input->>'errorKind', ''), COALESCE(i.input->>'error', '')
FROM causet_parked_events p
JOIN causet_blocked_keys k USING (topic, partition, projection, fork_id, entity_id)
LEFT JOIN causet_incidents i ON i.id = k.head_workflow_id
WHERE p.projection = $1
ORDER BY p.seq
LIMIT $2`, projection, limit)
	if err != nil {
		return nil, fmt.Errorf("read the parked events of %s: %w", projection, err)
	}
	var out []parkedEvent
	var raw []byte
	var p parkedEvent
	_, err = pgx.ForEachRow(rows, []any{&raw, &p.head, &p.incidentKind, &p.incidentError}, func() error {
		var in contract.RetryInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return fmt.Errorf("parked event: %w", err)
		}
		p.in = in
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the parked events of %s: %w", projection, err)
	}
	return out, nil
}

// runInput reads a retry run's input from the first event of its history.
func runInput(ctx context.Context, s Sources, id, runID string) (contract.RetryInput, error) {
	var in contract.RetryInput
	it := s.Temporal.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return in, fmt.Errorf("workflow %s: no history", id)
	}
	e, err := it.Next()
	if err != nil {
		return in, fmt.Errorf("workflow %s: read its start: %w", id, err)
	}
	payloads := e.GetWorkflowExecutionStartedEventAttributes().GetInput()
	if payloads == nil || len(payloads.GetPayloads()) == 0 {
		return in, fmt.Errorf("workflow %s: its start has no input", id)
	}
	if err := s.DataConverter.FromPayload(payloads.GetPayloads()[0], &in); err != nil {
		return in, fmt.Errorf("workflow %s: decode its input: %w", id, err)
	}
	return in, nil
}
