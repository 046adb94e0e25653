package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/workflows"
)

// runIncidents runs `causet incidents args…` and returns what it printed.
func runIncidents(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	old := incidentsOut
	incidentsOut = &out
	defer func() { incidentsOut = old }()
	require.NoError(t, run(append([]string{"incidents"}, args...)))
	return out.String()
}

// incidentWorker points the commands at a Temporal server and a task queue
// of the test's own, where a worker runs the incident workflow: its probes
// fail with probeErr, the states it sets go to setState, and its holds are
// released at once.
func incidentWorker(t *testing.T, probeErr string, setState func(contract.IncidentState)) (testenv.TemporalServer, string) {
	t.Helper()
	return incidentWorkerAwaiting(t, probeErr, setState, func(context.Context) error { return nil })
}

// incidentWorkerAwaiting is incidentWorker whose holds are released when
// await returns.
func incidentWorkerAwaiting(t *testing.T, probeErr string, setState func(contract.IncidentState),
	await func(context.Context) error) (testenv.TemporalServer, string) {
	t.Helper()
	srv := testenv.Temporal(t)
	tq := testenv.TaskQueue(t)
	t.Setenv("TEMPORAL_ADDRESS", srv.HostPort)
	t.Setenv("TEMPORAL_NAMESPACE", srv.Namespace)
	t.Setenv("CAUSET_TASK_QUEUE", tq)

	w := sdkworker.New(srv.Client, tq, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(workflows.ProjectionIncidentWorkflow, workflow.RegisterOptions{Name: contract.IncidentWorkflowName})
	w.RegisterActivityWithOptions(func(context.Context, contract.IncidentInput) (contract.ProbeResult, error) {
		return contract.ProbeResult{Error: probeErr}, nil
	}, activity.RegisterOptions{Name: contract.ProbeIncidentActivity})
	w.RegisterActivityWithOptions(func(_ context.Context, in contract.SetIncidentStateInput) error {
		setState(in.State)
		return nil
	}, activity.RegisterOptions{Name: contract.SetIncidentStateActivity})
	w.RegisterActivityWithOptions(func(ctx context.Context, _ string) error { return await(ctx) },
		activity.RegisterOptions{Name: contract.AwaitIncidentReleasedActivity})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return srv, tq
}

// TestIncidentsCommands lists, shows and resolves an incident on a real
// server, as an operator would; its probes keep failing, so only the
// resolve signal closes it.
func TestIncidentsCommands(t *testing.T) {
	var states []contract.IncidentState
	srv, tq := incidentWorker(t, `column "followed_at" does not exist`, func(st contract.IncidentState) { states = append(states, st) })

	fp := strings.ReplaceAll(tq, "-", "")[:16]
	in := contract.IncidentInput{Projection: "artist_followers", Fingerprint: fp, Policy: config.IncidentHold, ErrorKind: "sql",
		Error: `column "followed_at" does not exist`, Pattern: `column "followed_at" does not exist`,
		Sample: event.Envelope{EventID: "e1", EventType: "ARTIST_FOLLOWED", EntityID: "u1", ForkID: "production", Payload: []byte(`{}`)},
		Retry:  config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 1, Max: time.Second}}
	id := contract.IncidentWorkflowID(in.Projection, fp)
	ctx := context.Background()
	_, err := srv.Client.SignalWithStartWorkflow(ctx, id, contract.SignalIncidentFailures, contract.IncidentFailures{Events: 25, Held: 6, At: time.Now()},
		client.StartWorkflowOptions{ID: id, TaskQueue: tq, TypedSearchAttributes: contract.IncidentSearchAttributes(in.Projection, contract.IncidentHolding)},
		contract.IncidentWorkflowName, in)
	require.NoError(t, err)

	var out string
	require.Eventually(t, func() bool {
		out = runIncidents(t, "list")
		return strings.Contains(out, id)
	}, 30*time.Second, 500*time.Millisecond, "visibility lists the incident")
	require.Regexp(t, id+`\s+holding\s+25\s+6\s+`, out)
	require.Contains(t, out, `column "followed_at" does not exist`)
	require.NotContains(t, runIncidents(t, "list", "--projection", "other"), id)

	var st contract.IncidentStatus
	require.NoError(t, json.Unmarshal([]byte(runIncidents(t, "show", id)), &st))
	require.Equal(t, contract.IncidentHolding, st.State)
	require.Equal(t, 25, st.EventsAffected)

	require.Equal(t, id+": resolve sent\n", runIncidents(t, "resolve", id, "--reason", "column added", "--identity", "alice@ops"))
	require.NoError(t, srv.Client.GetWorkflow(ctx, id, "").Get(ctx, &st))
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "alice@ops", st.ResolvedBy)
	require.Equal(t, "column added", st.Reason)
	require.Equal(t, []contract.IncidentState{contract.IncidentReleasing, contract.IncidentResolved}, states)

	require.Eventually(t, func() bool {
		return regexpMatch(runIncidents(t, "list", "--all"), id+`\s+resolved\s+25\s+6`)
	}, 30*time.Second, 500*time.Millisecond)
	require.NotContains(t, runIncidents(t, "list"), id, "closed incidents are listed with --all only")

	err = run([]string{"incidents", "resolve", "projection-retry:x:y:z"})
	require.ErrorContains(t, err, "is not an incident ID")
}

func regexpMatch(s, pattern string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// An incident whose workflow ended (terminated here) while its row still
// holds events: resolve starts a new run from the row, which keeps the time
// the incident opened, and the decision goes through.
func TestIncidentsResolveRestartsAnEndedRun(t *testing.T) {
	url := testenv.PostgresURL(t)
	t.Setenv("DATABASE_URL", url)
	srv, tq := incidentWorker(t, "still failing", func(contract.IncidentState) {})

	fp := strings.ReplaceAll(tq, "-", "")[:16]
	in := contract.IncidentInput{Projection: "artist_followers", Fingerprint: fp, Policy: config.IncidentHold, ErrorKind: "sql",
		Error: "boom", Pattern: "boom", Sample: event.Envelope{EventID: "e1", EventType: "E", EntityID: "u1", ForkID: "production", Payload: []byte(`{}`)},
		Retry: config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 1, Max: time.Second}}
	id := contract.IncidentWorkflowID(in.Projection, fp)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	opened := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Microsecond)
	_, err = pool.Exec(ctx, `INSERT INTO causet_incidents (id, projection, fingerprint, state, input, opened_at) VALUES ($1, $2, $3, 'holding', $4, $5)`,
		id, in.Projection, fp, b, opened)
	require.NoError(t, err)
	_, err = srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, contract.IncidentWorkflowName, in)
	require.NoError(t, err)
	require.NoError(t, srv.Client.TerminateWorkflow(ctx, id, "", "its history failed"))

	require.Equal(t, id+": resolve sent to a new run (its workflow had ended while it held events)\n",
		runIncidents(t, "resolve", id, "--reason", "fixed", "--identity", "bob@ops"))
	var st contract.IncidentStatus
	require.NoError(t, srv.Client.GetWorkflow(ctx, id, "").Get(ctx, &st))
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "bob@ops", st.ResolvedBy)
	require.True(t, st.FirstSeen.Equal(opened), "the new run keeps when the incident opened: %s, want %s", st.FirstSeen, opened)
}

// A decision sent to an incident already decided (its run releases, and no
// longer listens for one) is not sent: the command says who decided what,
// instead of answering "sent" to a run that would ignore it.
func TestIncidentsSecondDecisionIsNotSent(t *testing.T) {
	release := make(chan struct{})
	srv, tq := incidentWorkerAwaiting(t, "still failing", func(contract.IncidentState) {}, func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	fp := strings.ReplaceAll(tq, "-", "")[:16]
	in := contract.IncidentInput{Projection: "artist_followers", Fingerprint: fp, Policy: config.IncidentHold, ErrorKind: "sql",
		Error: "boom", Pattern: "boom", Sample: event.Envelope{EventID: "e1", EventType: "E", EntityID: "u1", ForkID: "production", Payload: []byte(`{}`)},
		Retry: config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 1, Max: time.Minute}}
	id := contract.IncidentWorkflowID(in.Projection, fp)
	ctx := context.Background()
	_, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq}, contract.IncidentWorkflowName, in)
	require.NoError(t, err)

	require.Equal(t, id+": resolve sent\n", runIncidents(t, "resolve", id, "--reason", "fixed", "--identity", "alice@ops"))
	require.Eventually(t, func() bool {
		v, err := srv.Client.QueryWorkflow(ctx, id, "", contract.QueryStatus)
		var st contract.IncidentStatus
		return err == nil && v.Get(&st) == nil && st.State == contract.IncidentReleasing
	}, 30*time.Second, 100*time.Millisecond, "the run never released")
	out := runIncidents(t, "dead-letter-all", id, "--reason", "too late", "--identity", "bob@ops")
	require.Equal(t, id+": dead-letter-all not sent: already decided by alice@ops (fixed), now releasing\n", out)
	close(release)
	var st contract.IncidentStatus
	require.NoError(t, srv.Client.GetWorkflow(ctx, id, "").Get(ctx, &st))
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "alice@ops", st.ResolvedBy)
}
