package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
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
	_, err := a.Store.SetState(ctx, in.ID, in.State, from...)
	return err
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
