package worker_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
)

// TestIncidentResolvedByProbeEndToEnd runs an incident on a real server
// against the seed's schema mismatch: its probes fail (and write nothing:
// each is rolled back), a deploy of the fixed IR is signalled, the next
// probe succeeds at once and the incident resolves, releases and closes.
// With -record-histories its history is written for the replay test.
func TestIncidentResolvedByProbeEndToEnd(t *testing.T) {
	e := newWorkerEnv(t, testenv.FollowersIR)
	sample := event.Envelope{EventID: "incident-sample-" + e.tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-1", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-1"}`)}
	// The fingerprint of the failure the probes meet: a probe that fails
	// another way would resolve the incident.
	missing := &pgconn.PgError{Code: "42703", Message: `column "followed_at" of relation "artist_followers" does not exist`}
	in := contract.IncidentInput{
		Projection: "artist_followers", Fingerprint: incident.Of("artist_followers", "sql", missing).ID, Policy: config.IncidentHold, ErrorKind: "sql",
		SQLState: "42703", Error: `column "followed_at" of relation "artist_followers" does not exist`,
		Pattern: `column "followed_at" of relation "artist_followers" does not exist`, Sample: sample,
		Retry:   config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: 4 * time.Second},
		HoldMax: time.Hour, MaxHeld: 1000,
	}
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)
	store := incident.NewStore(e.pool)
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	holds, err := store.Open(e.ctx, tx, in)
	require.NoError(t, err)
	require.True(t, holds)
	require.NoError(t, tx.Commit(e.ctx))

	_, err = e.srv.Client.SignalWithStartWorkflow(e.ctx, id, contract.SignalIncidentFailures,
		contract.IncidentFailures{Events: 20, Held: 1, EventIDs: []string{sample.EventID}, At: time.Now().UTC()},
		client.StartWorkflowOptions{ID: id, TaskQueue: e.tq, TypedSearchAttributes: contract.IncidentSearchAttributes(in.Projection, contract.IncidentHolding)},
		contract.IncidentWorkflowName, in)
	require.NoError(t, err)

	var st contract.IncidentStatus
	require.Eventually(t, func() bool {
		v, err := e.srv.Client.QueryWorkflow(e.ctx, id, "", contract.QueryStatus)
		if err != nil {
			return false
		}
		return v.Get(&st) == nil && st.Probes >= 2
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, contract.IncidentHolding, st.State)
	require.Contains(t, st.LastProbeError, `column "followed_at"`)
	require.Equal(t, 20, st.EventsAffected)
	require.Equal(t, []string{sample.EventID}, st.SampleEventIDs)

	deploy(t, e.ctx, e.pool, testenv.FollowersFixedIR)
	deployedAt := time.Now()
	require.NoError(t, e.srv.Client.SignalWorkflow(e.ctx, id, "", contract.SignalDeployed, nil))
	var final contract.IncidentStatus
	require.NoError(t, e.srv.Client.GetWorkflow(e.ctx, id, "").Get(e.ctx, &final))
	require.Equal(t, contract.IncidentResolved, final.State)
	require.Equal(t, "probe", final.ResolvedBy)
	require.Less(t, final.ResolvedAt.Sub(deployedAt), 3*time.Second, "the deploy is probed at once, not at the next backoff")
	require.NotNil(t, final.CaughtUpAt)

	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM artist_followers`).Scan(&n))
	require.Zero(t, n, "probes roll back: the sample is applied by its release, not by a probe")
	states, err := store.States(e.ctx, []string{id})
	require.NoError(t, err)
	require.Equal(t, contract.IncidentResolved, states[id])
	if *recordHistories {
		writeHistory(t, e.ctx, e.srv.Client, id, "incident_resolved_by_probe.json")
	}
}
