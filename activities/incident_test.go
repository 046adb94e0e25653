package activities_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// fakeProber answers a probe as the engine would: it runs BeforeCommit
// with the pair's result, and reports whether it rolled back.
type fakeProber struct {
	res        projection.Result
	err        error // the apply failed before a decision
	rolledBack bool
}

func (f *fakeProber) ApplyWith(ctx context.Context, proj string, ev event.Envelope, opts projection.ApplyOptions) (projection.Result, error) {
	if f.err != nil {
		return projection.Result{Projection: proj, Status: projection.StatusFailed, Err: &projection.ApplyError{Kind: contract.KindConnection, Err: f.err}}, f.err
	}
	if err := opts.BeforeCommit(ctx, nil, []projection.Result{f.res}); err != nil {
		f.rolledBack = true
		return f.res, err
	}
	return f.res, nil
}

func probe(t *testing.T, p *fakeProber, in contract.IncidentInput) (contract.ProbeResult, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&activities.Incidents{Prober: p})
	v, err := env.ExecuteActivity((&activities.Incidents{}).ProbeIncident, in)
	if err != nil {
		return contract.ProbeResult{}, err
	}
	var r contract.ProbeResult
	require.NoError(t, v.Get(&r))
	return r, nil
}

func TestProbeIncidentNeverApplies(t *testing.T) {
	missing := &pgconn.PgError{Code: "42703", Message: `column "plays_per_day" of relation "artist_stats" does not exist`}
	in := contract.IncidentInput{Projection: "artist_stats", Fingerprint: incident.Of("artist_stats", "sql", missing).ID}
	failed := func(kind contract.ErrorKind, err error) projection.Result {
		return projection.Result{Projection: "artist_stats", Status: projection.StatusFailed, IRVersion: 3, Err: &projection.ApplyError{Kind: kind, Err: err}}
	}

	p := &fakeProber{res: projection.Result{Projection: "artist_stats", Status: projection.StatusApplied, IRVersion: 4}}
	r, err := probe(t, p, in)
	require.NoError(t, err)
	require.Equal(t, contract.ProbeResult{OK: true, IRVersion: 4}, r)
	require.True(t, p.rolledBack, "a probe that would apply is rolled back")

	p = &fakeProber{res: projection.Result{Projection: "artist_stats", Status: projection.StatusDuplicate}}
	r, err = probe(t, p, in)
	require.NoError(t, err)
	require.True(t, r.OK)

	p = &fakeProber{res: failed(contract.KindSQL, missing)}
	_, err = probe(t, p, in)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr, "the same failure: still an incident, and the probe shows as failed")
	require.Equal(t, contract.ProbeFailedType, appErr.Type())
	require.True(t, appErr.NonRetryable(), "the workflow probes again on its own backoff")
	var still contract.ProbeResult
	require.NoError(t, appErr.Details(&still))
	require.Equal(t, contract.ProbeResult{Error: missing.Message, IRVersion: 3}, still)
	require.True(t, p.rolledBack)

	p = &fakeProber{res: failed(contract.KindIREval, errors.New("on.TRACK_PLAYED.columns.plays_per_day: division by zero"))}
	r, err = probe(t, p, in)
	require.NoError(t, err)
	require.True(t, r.OK, "the sample's own failure is not the incident's")
	require.Equal(t, "on.TRACK_PLAYED.columns.plays_per_day: division by zero", r.OtherError)

	p = &fakeProber{err: errors.New("dial tcp 127.0.0.1:5432: connection refused")}
	_, err = probe(t, p, in)
	require.ErrorContains(t, err, "connection refused", "a probe that cannot reach the database is retried, not answered")
}
