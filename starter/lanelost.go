package starter

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/contract"
)

// wasRecovered reports whether the lost lane run runID of k was already
// recovered (its events sent again or accounted for).
func (o *laneRouter) wasRecovered(k LaneKey, runID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.recovered[k] == runID
}

// recoverLane handles a lane run that closed without completing (an
// operator terminated it, it hit a Temporal limit): the events it accepted
// and never started would otherwise be lost with it. They are read back
// from the run's history (its input queue and its accepted enqueue
// updates) and sent again, in order, to a new run of the lane; the last
// event it did start becomes the key's head, so the key stays blocked until
// that retry workflow settles. If the history cannot be read the key stays
// blocked, and the alert repeats at each check. Either way the bridge logs
// projection_lane_lost at ERROR and counts lanes_lost_total: the key is
// never unblocked silently.
func (r *laneRouter) recoverLane(ctx context.Context, k LaneKey, lastRun string, lane laneRun) {
	p := r.p
	b, o := p.b, r
	log := p.log.With("projectionName", k.Projection, "forkId", k.ForkID, "entityId", k.EntityID,
		"laneId", k.laneID(), "laneRunId", lane.runID, "laneStatus", lane.status.String())
	events, err := r.laneEvents(ctx, k, lane.runID)
	if err != nil {
		b.m.lanesLost.Inc()
		log.Error("projection_lane_lost", "event", "projection_lane_lost", "redelivered", 0,
			"error", "cannot read the lane's history: the key stays blocked: "+err.Error())
		r.later(k)
		return
	}
	var resend []contract.RetryInput
	head := ""
	for _, in := range events {
		id := contract.RetryWorkflowID(in.Projection, in.Event.ForkID, in.Event.EventID)
		_, err := b.opts.Lanes.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			resend = append(resend, in)
		case err != nil:
			log.Debug("cannot check a lost lane's event, next sweep retries", "workflowId", id, "error", err.Error())
			return
		default:
			head = id // started: it runs on its own, and later events wait for it
		}
	}

	o.mu.Lock()
	if _, ok := o.blocked[k]; !ok || o.queued[k] > 0 || o.lastRun[k] != lastRun || p.ctx.Err() != nil {
		o.mu.Unlock()
		return // something of k moved meanwhile: the next sweep looks again
	}
	if head != "" {
		if err := b.opts.Blocks.Add(ctx, nil, p.topic, p.id, []BlockedKey{{LaneKey: k, Head: head}}); err != nil {
			o.mu.Unlock()
			log.Warn("cannot record a lost lane's last started event as the key's head, next sweep retries", "error", err.Error())
			return
		}
		o.head[k] = head
	}
	o.recovered[k] = lane.runID
	o.lastRun[k] = ""
	seg := &segment{} // already committed: no offset waits for these
	for _, in := range resend {
		in.WaitFor = ""
		rec := &kgo.Record{Topic: in.Source.Topic, Partition: in.Source.Partition, Offset: in.Source.Offset, Key: in.Key}
		o.jobs++
		o.queued[k]++
		q, scheduled := o.keyq[k]
		if !scheduled {
			o.ready = append(o.ready, k)
		}
		o.keyq[k] = append(q, laneJob{seg: seg, rec: rec, in: in, key: k})
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	b.m.lanesLost.Inc()
	log.Error("projection_lane_lost", "event", "projection_lane_lost", "redelivered", len(resend),
		"accepted", len(events), "headWorkflowId", head,
		"error", "lane closed without completing: its unstarted events are sent to a new lane run")
}

// laneEvents returns, in lane order, the events the lane run runID was
// responsible for: the queue it started with (carried over a
// continue-as-new) and the events its enqueue updates added.
func (r *laneRouter) laneEvents(ctx context.Context, k LaneKey, runID string) ([]contract.RetryInput, error) {
	p := r.p
	dc := p.b.opts.DataConverter
	it := p.b.opts.Lanes.GetWorkflowHistory(ctx, k.laneID(), runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []contract.RetryInput
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("read lane history: %w", err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			var in contract.LaneInput
			if err := dc.FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
				return nil, fmt.Errorf("decode lane input: %w", err)
			}
			out = append(out, in.Queue...)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			req := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
			if req.GetName() != contract.UpdateEnqueue {
				continue
			}
			var in contract.RetryInput
			if err := dc.FromPayloads(req.GetArgs(), &in); err != nil {
				return nil, fmt.Errorf("decode enqueued event: %w", err)
			}
			out = append(out, in)
		}
	}
	return out, nil
}
