package rollout

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// Engine is what a rollout checks and deploys with; *projection.Engine is
// one.
type Engine interface {
	Trier
	Deploy(ctx context.Context, doc *projection.Document) (int, error)
}

// Runner does the work of a rollout's activities.
type Runner struct {
	Sources Sources
	Engine  Engine
	// Replay holds the replayer's settings (Client, TaskQueue, Retry,
	// ReplayWindow, DedupeHorizon, Propagator); each batch sets the rest.
	Replay dlq.ReplayerOptions
	Logger *slog.Logger
	// CheckPage is how many events a check tries and records at a time
	// (0: DefaultCheckPage).
	CheckPage int
}

func retryID(proj string, e EventOutcome) string {
	return contract.RetryWorkflowID(proj, e.Event.ForkID, e.Event.EventID)
}

// Candidate decodes a rollout's document.
func Candidate(in contract.RolloutInput) (*projection.Document, error) {
	doc, err := projection.Parse(in.Document)
	if err != nil {
		return nil, err
	}
	if doc.Name != in.Projection {
		return nil, fmt.Errorf("the candidate is projection %q, the rollout's is %q", doc.Name, in.Projection)
	}
	return doc, nil
}

// CheckProgress is how far a rollout's check has got: how many events it
// has tried and recorded, how many of them are dead letters to replay, and
// their report so far. A check tried again with it goes on from there.
type CheckProgress struct {
	Recorded int    `json:"recorded"`
	ToReplay int    `json:"toReplay"`
	Report   Report `json:"report"`
}

// DefaultCheckPage is how many failing events a rollout's check tries and
// records at a time before it reports its progress.
const DefaultCheckPage = 2000

// Check gathers the failing events, checks the candidate on them and
// records them as the rollout's affected events, a page at a time, calling
// beat after each. From a progress (nil: from the start) it keeps the pages
// recorded by then and tries only the events they lack.
func (r *Runner) Check(ctx context.Context, rolloutID string, in contract.RolloutInput, from *CheckProgress,
	beat func(CheckProgress)) (contract.CheckCandidateResult, error) {
	var out contract.CheckCandidateResult
	doc, err := Candidate(in)
	if err != nil {
		return out, err
	}
	failing, g, err := Gather(ctx, r.Sources, in.Projection, in.Limit)
	if err != nil {
		return out, err
	}
	p := CheckProgress{Report: Report{Projection: doc.Name, Deployed: r.Engine.Version(doc.Name), BySource: map[Source]int{},
		Totals: map[Outcome]int{}, DLQRecords: g.DLQRecords, Superseded: g.Superseded, Truncated: g.Truncated}}
	if from != nil {
		p = CheckProgress{Recorded: from.Recorded, ToReplay: from.ToReplay, Report: from.Report.clone()}
		p.Report.DLQRecords, p.Report.Superseded, p.Report.Truncated = g.DLQRecords, g.Superseded, p.Report.Truncated || g.Truncated
	}
	kept, err := keepRecorded(ctx, r.Sources.Pool, rolloutID, p.Recorded)
	if err != nil {
		return out, err
	}
	if len(kept) > 0 {
		failing = slices.DeleteFunc(failing, func(f Failing) bool {
			return kept[projection.DedupeKey(in.Projection, f.Event.ForkID, f.Event.EventID)]
		})
	}
	failing = entityOrder(failing)
	size := cmp.Or(r.CheckPage, DefaultCheckPage)
	for start := 0; start < len(failing); start += size {
		page, err := Check(ctx, r.Engine, doc, failing[start:min(start+size, len(failing))], g)
		if err != nil {
			return out, err
		}
		if err := recordPage(ctx, r.Sources.Pool, rolloutID, in.Projection, p.Recorded, page.Events); err != nil {
			return out, fmt.Errorf("record the rollout's events: %w", err)
		}
		p.Recorded += len(page.Events)
		for _, e := range page.Events {
			if e.Source == DeadLettered && e.Outcome == WouldApply {
				p.ToReplay++
			}
		}
		page.Events = nil
		p.Report.add(page)
		if beat != nil {
			beat(CheckProgress{Recorded: p.Recorded, ToReplay: p.ToReplay, Report: p.Report.clone()})
		}
	}
	rep := p.Report
	return contract.CheckCandidateResult{Affected: rep.Checked, WouldApply: rep.Totals[WouldApply], WouldFail: rep.Totals[StillFails],
		OutOfOrder: rep.Totals[OutOfOrder], ToReplay: p.ToReplay, Summary: rep.Text(5)}, nil
}

// Deploy deploys the candidate unless the newest deployed version is it
// already, then asks the projection's incidents for a probe at once.
func (r *Runner) Deploy(ctx context.Context, in contract.RolloutInput) (contract.DeployCandidateResult, error) {
	doc, err := Candidate(in)
	if err != nil {
		return contract.DeployCandidateResult{}, err
	}
	res, err := r.deploy(ctx, doc, in.Version)
	if err != nil {
		return res, err
	}
	return res, r.probeIncidents(ctx, in.Projection)
}

// deploy deploys doc as version (0: whatever comes next). A version other
// than the one the rollout checked against deployed since it started (by
// someone else) stops it: deploying over it would undo their change.
func (r *Runner) deploy(ctx context.Context, doc *projection.Document, version int) (contract.DeployCandidateResult, error) {
	deps, err := projection.List(ctx, r.Sources.Pool)
	if err != nil {
		return contract.DeployCandidateResult{}, err
	}
	newest, same := SameAsDeployed(deps, doc)
	if same {
		return contract.DeployCandidateResult{Version: newest.Version, AlreadyDeployed: true, DeployedAt: newest.DeployedAt}, nil
	}
	if have := versionOf(newest); version > 0 && have != version-1 {
		return contract.DeployCandidateResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("version %d of %s was deployed by someone else after the rollout started (it was to deploy version %d over version %d): "+
				"nothing deployed; check and roll out again against the newest version", have, doc.Name, version, version-1),
			contract.RolloutSupersededType, nil)
	}
	v, err := r.Engine.Deploy(ctx, doc)
	if err != nil {
		return contract.DeployCandidateResult{}, err
	}
	return contract.DeployCandidateResult{Version: v, DeployedAt: time.Now().UTC()}, nil
}

func versionOf(d *projection.Deployment) int {
	if d == nil {
		return 0
	}
	return d.Version
}

// SameAsDeployed returns the newest deployed version of doc's projection
// (nil when none) and whether doc is it.
func SameAsDeployed(deps []projection.Deployment, doc *projection.Document) (*projection.Deployment, bool) {
	want, err := json.Marshal(doc)
	if err != nil {
		return nil, false
	}
	for i, d := range deps {
		if d.Name == doc.Name {
			have, err := json.Marshal(d.Document)
			return &deps[i], err == nil && bytes.Equal(have, want)
		}
	}
	return nil, false
}

// probeIncidents signals the projection's holding incidents that a new
// version is deployed: each probes at once instead of at its next backoff.
func (r *Runner) probeIncidents(ctx context.Context, proj string) error {
	rows, err := incident.NewStore(r.Sources.Pool).Active(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if row.Input.Projection != proj || row.State != contract.IncidentHolding {
			continue
		}
		if err := r.Sources.Temporal.SignalWorkflow(ctx, row.ID, "", contract.SignalDeployed, nil); err != nil && !isNotFound(err) {
			return fmt.Errorf("signal incident %s: %w", row.ID, err)
		}
	}
	return nil
}

// ReplayBatch replays the next batch of the rollout's dead letters, in
// order and at the input's rate. A run still open is signalled; one that
// closed is started again from its DLQ record. Refused and failed replays
// are counted, not retried: they stay dead letters. done, when a try of
// the batch before this one reported it, is where to go on from; progress
// is told the result after each replay.
func (r *Runner) ReplayBatch(ctx context.Context, in contract.ReplayFailingInput, done *contract.ReplayFailingResult,
	progress func(contract.ReplayFailingResult)) (contract.ReplayFailingResult, error) {
	out := contract.ReplayFailingResult{Next: in.After}
	if done != nil {
		out = *done
	}
	left := in.Batch - out.Tried
	if left <= 0 {
		return out, nil
	}
	rows, err := replays(ctx, r.Sources.Pool, in.RolloutID, out.Next, left)
	if err != nil {
		return out, err
	}
	if len(rows) < left {
		out.Done = true
	}
	if len(rows) == 0 {
		return out, nil
	}
	var items map[int]dlq.Item
	if r.Sources.DLQ != nil {
		if items, err = readItems(ctx, *r.Sources.DLQ, rows); err != nil {
			return out, err
		}
	}
	o := r.Replay
	o.Rate, o.Identity, o.Reason, o.Logger = in.Rate, in.Identity, in.Reason, r.Logger
	rp, err := dlq.NewReplayer(o)
	if err != nil {
		return out, err
	}
	for _, row := range rows {
		if row.after != nil {
			// Its entity's earlier dead letter goes first: its replay must
			// have applied or failed again before this one is sent, or this
			// one could apply first and that one be refused as out of order.
			settled, err := r.awaitSettled(ctx, *row.after, func() {
				if progress != nil {
					progress(out)
				}
			})
			if err != nil {
				return out, err
			}
			if !settled {
				// Out of time for this try: the next batch goes on from here.
				out.Done = false
				return out, nil
			}
		}
		it, ok := items[row.seq]
		if !ok {
			// Known to Temporal only: its open run is signalled by ID.
			it = dlq.Item{Record: dlq.Record{Workflow: &dlq.WorkflowRef{ID: row.workflowID}}}
		}
		res, err := rp.Replay(ctx, it)
		if err != nil {
			return out, err
		}
		switch res.Outcome {
		case dlq.Signalled, dlq.Restarted:
			out.Replayed++
		case dlq.AlreadyDone:
			// Dead-lettered at the check, replaying or applied now: the
			// replay an attempt of this batch sent before it was cut off
			// (a worker killed after the signal, before its heartbeat
			// recorded it), which this attempt finds.
			out.Replayed++
		case dlq.Refused:
			out.Refused++
		case dlq.Failed:
			out.Failed++
		}
		out.Next = row.seq
		out.Tried++
		if progress != nil {
			progress(out)
		}
	}
	return out, nil
}

// settleWaitMargin is how much of a batch's time is kept when waiting for
// an earlier dead letter to settle: the batch returns its progress before
// its deadline rather than time out.
const settleWaitMargin = 15 * time.Second

// awaitSettled waits until the retry run id is not replaying or retrying
// (applied and closed, dead-lettered again, or never replayed), beating
// meanwhile; false when the batch's deadline comes first.
func (r *Runner) awaitSettled(ctx context.Context, id string, beat func()) (bool, error) {
	deadline, bounded := ctx.Deadline()
	for {
		st, err := dlq.LookupState(ctx, r.Replay.Client, id)
		if err != nil {
			return false, err
		}
		busy := st.Open && (st.State == contract.StateRetrying || st.State == contract.StateReplaying || st.State == contract.StateHeld || st.PendingTask)
		if !busy {
			return true, nil
		}
		if bounded && time.Until(deadline) < settleWaitMargin {
			return false, nil
		}
		beat()
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CountSettled counts how the events the rollout acts on stand: applied
// (the ledger has them), failing (their run was dead-lettered again since
// the deploy) or pending.
//
// It also replays what no batch does: an event the check found on its
// schedule (retrying, parked, held) whose run was dead-lettered before the
// deploy — between the check and the deploy, or listed as dead-lettered
// by visibility only after the check — is replayed by the first count that
// lists it (at most stragglersPerCount a count; not while a dead letter of
// its entity that the batches replay is pending, nor while events of its
// entity are parked, so that an entity's events keep their order). One
// whose entity has applied a later event since cannot apply: it counts as
// failing. A listing that lags lists it a count later; one that is stale
// (it was replayed since) finds the run replaying when looked up, and
// sends nothing.
func (r *Runner) CountSettled(ctx context.Context, in contract.CountSettledInput) (contract.SettledCount, error) {
	var out contract.SettledCount
	evs, err := readActedOn(ctx, r.Sources.Pool, in.RolloutID)
	if err != nil {
		return out, err
	}
	applied, err := appliedKeys(ctx, r.Sources.Pool, evs)
	if err != nil {
		return out, err
	}
	deadLettered, err := openDeadLetters(ctx, r.Sources, in.Projection)
	if err != nil {
		return out, err
	}
	if in.Version > 0 {
		deps, err := projection.List(ctx, r.Sources.Pool)
		if err != nil {
			return out, err
		}
		for _, d := range deps {
			if d.Name == in.Projection && d.Version > in.Version {
				out.Superseded = d.Version
			}
		}
	}
	failingAgain := func(e actedOn) bool {
		at, ok := deadLettered[e.workflowID]
		return ok && !at.IsZero() && !at.Before(in.DeployedAt)
	}
	batchesPending := map[entityRef]bool{}
	for _, e := range evs {
		if e.source == DeadLettered && e.entity.id != "" && !applied[e.key] && !failingAgain(e) {
			batchesPending[e.entity] = true
		}
	}
	var candidates []actedOn
	for _, e := range evs {
		switch {
		case applied[e.key]:
			out.Applied++
		case failingAgain(e):
			out.Failing++
		default:
			out.Pending++
			at, listed := deadLettered[e.workflowID]
			if listed && !at.IsZero() && e.source != DeadLettered && !batchesPending[e.entity] {
				candidates = append(candidates, e)
			}
		}
	}
	if len(candidates) == 0 {
		return out, nil
	}
	// Such an event's key may have moved on since the check: a later event
	// of its entity applied (the replay would be refused as out of order:
	// the candidate cannot apply it, so it counts as failing), or parked
	// behind it and about to be released now that it is dead-lettered (a
	// replay would race that release: the next count decides).
	positions := make([]event.Envelope, len(candidates))
	for i, e := range candidates {
		positions[i] = event.Envelope{ForkID: e.entity.fork, EntityID: e.entity.id, Sequence: e.sequence}
	}
	later, err := projection.LaterMarks(ctx, r.Sources.Pool, in.Projection, positions)
	if err != nil {
		return out, err
	}
	parked, err := parkedEntities(ctx, r.Sources.Pool, in.Projection, candidates)
	if err != nil {
		return out, err
	}
	var stragglers []string
	for i, e := range candidates {
		switch {
		case e.entity.id != "" && later[i] != nil:
			out.Pending--
			out.Failing++
		case parked[e.entity]:
		case len(stragglers) < stragglersPerCount:
			stragglers = append(stragglers, e.workflowID)
		}
	}
	if len(stragglers) > 0 {
		if out.Replayed, err = r.replayStragglers(ctx, in.RolloutID, stragglers); err != nil {
			return out, err
		}
	}
	return out, nil
}

// stragglersPerCount bounds the replays one count sends (each may wait up
// to dlq.DefaultSettleWait for its run's pending task, within the count's
// minute).
const stragglersPerCount = 20

// replayStragglers signals the open dead-lettered runs ids to replay,
// while the count's deadline leaves room, and returns how many it sent.
func (r *Runner) replayStragglers(ctx context.Context, rolloutID string, ids []string) (int, error) {
	o := r.Replay
	o.Identity = rolloutID
	o.Reason = "dead-lettered before the rollout's deploy, after its check"
	o.Logger = r.Logger
	rp, err := dlq.NewReplayer(o)
	if err != nil {
		return 0, err
	}
	sent := 0
	for _, id := range ids {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*dlq.DefaultSettleWait {
			break // the next count goes on
		}
		res, err := rp.Replay(ctx, dlq.Item{Record: dlq.Record{Workflow: &dlq.WorkflowRef{ID: id}}})
		if err != nil {
			return sent, err
		}
		if res.Outcome == dlq.Signalled {
			sent++
		}
	}
	return sent, nil
}

// openDeadLetters lists the projection's open dead letters with when each
// was dead-lettered (its memo; zero when the memo lacks it).
func openDeadLetters(ctx context.Context, s Sources, proj string) (map[string]time.Time, error) {
	runs, _, err := listRuns(ctx, s, proj, fmt.Sprintf("ExecutionStatus = 'Running' AND %s = '%s'",
		contract.AttrRetryState.GetName(), contract.StateDeadLettered))
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for id, r := range runs {
		if r.open && r.state == contract.StateDeadLettered {
			out[id] = r.deadLetteredAt
		}
	}
	return out, nil
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}
