package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// Prober applies one event in a transaction it may roll back;
// *projection.Engine is the production implementation.
type Prober interface {
	ApplyWith(ctx context.Context, projection string, ev event.Envelope, opts projection.ApplyOptions) (projection.Result, error)
}

// Incidents holds what the incident activities share. Register it with the
// worker beside Activities.
type Incidents struct {
	Prober Prober
	Store  *incident.Store
	Logger *slog.Logger
	// Client wakes the retry runs a hold has (SignalHoldEnded) when it
	// stops holding. Optional: without it, held runs find out on their
	// own backoff (at most two minutes later).
	Client client.Client
}

func (a *Incidents) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// errProbeRollback rolls a probe's transaction back: a probe never applies.
var errProbeRollback = errors.New("probe: rolled back")

// ProbeIncident tries the incident's sample event in a transaction that is
// rolled back whatever happens: OK when it would have applied (or was
// already applied).
func (a *Incidents) ProbeIncident(ctx context.Context, in contract.IncidentInput) (contract.ProbeResult, error) {
	var res *projection.Result
	out, err := a.Prober.ApplyWith(ctx, in.Projection, in.Sample, projection.ApplyOptions{
		BeforeCommit: func(_ context.Context, _ pgx.Tx, rs []projection.Result) error {
			if len(rs) > 0 {
				r := rs[0]
				res = &r
			}
			return errProbeRollback
		},
	})
	if res == nil {
		// The transaction never got to a decision: the database did not
		// answer, or the apply failed as a whole. The activity is retried.
		if err == nil {
			err = errors.New("no result")
		}
		if out.Err != nil {
			err = out.Err
		}
		return contract.ProbeResult{}, fmt.Errorf("probe %s: %w", in.Projection, err)
	}
	switch res.Status {
	case projection.StatusApplied, projection.StatusDuplicate:
		return contract.ProbeResult{OK: true, IRVersion: res.IRVersion}, nil
	}
	if res.Err == nil {
		return contract.ProbeResult{Error: "not applied", IRVersion: res.IRVersion}, nil
	}
	if fp := incident.Of(in.Projection, string(res.Err.Kind), res.Err); fp.ID != in.Fingerprint {
		// The systemic failure is gone; what is left is the sample's own,
		// which its release hands to a retry workflow as any failure.
		return contract.ProbeResult{OK: true, IRVersion: res.IRVersion, OtherError: res.Err.Error()}, nil
	}
	// Still failing this way: the activity fails, so the Temporal UI shows
	// the probe as failed, and is not retried (the workflow probes again on
	// its own backoff).
	failed := contract.ProbeResult{Error: res.Err.Error(), IRVersion: res.IRVersion}
	return failed, temporal.NewNonRetryableApplicationError("probe: the sample still fails: "+failed.Error, contract.ProbeFailedType, nil, failed)
}

// SetIncidentState moves the incident's row to the workflow's state: to
// releasing or dead_lettered from holding, and to resolved or dead_lettered
// once nothing is held. An incident without a row (policy dead-letter)
// is left alone.
func (a *Incidents) SetIncidentState(ctx context.Context, in contract.SetIncidentStateInput) error {
	from := in.From
	if len(from) == 0 {
		from = []contract.IncidentState{contract.IncidentHolding, contract.IncidentReleasing}
	}
	moved, err := a.Store.SetState(ctx, in.ID, in.State, from...)
	if err != nil || !moved || in.State == contract.IncidentHolding || a.Client == nil {
		return err
	}
	// The hold ended: its held runs ask where it went now, not at their
	// next backoff. A run not woken (listing is eventually consistent, a
	// signal may fail) still asks on its own, so a failure here is only
	// logged.
	if n, err := a.wakeHeldRuns(ctx, activity.GetInfo(ctx).TaskQueue, in.ID); err != nil {
		a.logger().Warn("held runs not woken: they ask on their own backoff", "incidentId", in.ID, "woken", n, "error", err.Error())
	}
	return nil
}

// wakeHeldRuns signals SignalHoldEnded to every held retry run on the task
// queue (listed by CausetRetryState; a run held by another incident asks
// once and goes on waiting). It returns how many it signalled.
func (a *Incidents) wakeHeldRuns(ctx context.Context, taskQueue, incidentID string) (int, error) {
	query := contract.OpenRetryRunsQuery(taskQueue, contract.StateHeld)
	woken := 0
	var token []byte
	for {
		resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1000, NextPageToken: token, Query: query})
		if err != nil {
			return woken, fmt.Errorf("list held runs: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			err := a.Client.SignalWorkflow(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), contract.SignalHoldEnded, incidentID)
			var nf *serviceerror.NotFound
			switch {
			case err == nil:
				woken++
			case errors.As(err, &nf): // it closed since it was listed
			default:
				return woken, fmt.Errorf("wake %s: %w", e.GetExecution().GetWorkflowId(), err)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return woken, nil
		}
	}
}

// IncidentRestart returns the input of a new run of incident id when its
// row holds (releases, dead-letters) events — a bridge reopened it as a new
// hold — and nil when the row has ended or there is none.
func (a *Incidents) IncidentRestart(ctx context.Context, id string) (*contract.IncidentInput, error) {
	row, found, err := a.Store.Get(ctx, id)
	if err != nil || !found {
		return nil, err
	}
	switch row.State {
	case contract.IncidentHolding, contract.IncidentReleasing, contract.IncidentDeadLettering:
		in := row.RestartInput(time.Now())
		return &in, nil
	}
	return nil, nil
}

// AwaitIncidentReleased waits until the bridges have released (or
// dead-lettered) every event parked for the incident, heartbeating the
// count left.
func (a *Incidents) AwaitIncidentReleased(ctx context.Context, id string) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n, err := parking.Behind(ctx, a.Store.Pool(), id)
		if err != nil {
			return err
		}
		activity.RecordHeartbeat(ctx, n)
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
