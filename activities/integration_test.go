package activities_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// engineWithFollowers gives a fresh database with ddl, artist_followers
// deployed, and a projection engine on it.
func engineWithFollowers(t *testing.T, ddl string) (*pgxpool.Pool, *projection.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testenv.Postgres(t)
	_, err := pool.Exec(ctx, ddl)
	require.NoError(t, err)
	engine, err := projection.NewEngine(ctx, pool, nil)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	data, err := exampleprojections.Document(projectionName)
	require.NoError(t, err)
	doc, err := projection.Parse(data)
	require.NoError(t, err)
	v, err := engine.Deploy(ctx, doc)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	return pool, engine
}

// rowCount counts the rows of artist_followers.
func rowCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM artist_followers").Scan(&n))
	return n
}

// ledgerRows counts the dedupe-ledger rows of (projection, fork, event).
func ledgerRows(t *testing.T, pool *pgxpool.Pool, eventID string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM causet_projection_applied WHERE projection = $1 AND key = causet_applied_key($1, $2, $3)`,
		projectionName, "production", eventID).Scan(&n))
	return n
}

// ApplyProjection with the real engine writes the projection's row and its
// ledger row once; the same event again is a duplicate and changes nothing.
func TestApplyProjectionWritesToPostgres(t *testing.T) {
	pool, engine := engineWithFollowers(t, mustDDL(t, projectionName))
	h := newHarness(t, engine, nil)

	out, err := h.apply(applyInput(followed("e1", "user-1", "artist-9"), 1))
	require.NoError(t, err)
	require.Equal(t, 1, out.IRVersion)
	require.False(t, out.Duplicate)
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, testenv.Followers(t, context.Background(), pool))
	require.Equal(t, 1, ledgerRows(t, pool, "e1"))

	again := followed("e1", "user-1", "artist-9")
	again.OccurredAt = occurred.Add(time.Hour) // a redelivery cannot change the row
	out, err = h.apply(applyInput(again, 2))
	require.NoError(t, err)
	require.True(t, out.Duplicate)
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, testenv.Followers(t, context.Background(), pool))
	require.Equal(t, 1, ledgerRows(t, pool, "e1"))

	require.Zero(t, total(t, h.reg, retriesTotal))
	require.Zero(t, total(t, h.reg, deadLettersTotal))
}

// The seed's failure: the table lacks a column the projection writes. The
// attempt fails as sql with PostgreSQL's message, writes nothing (no row,
// no ledger row, so a later attempt can still apply it) and counts a retry.
func TestApplyProjectionSchemaMismatchOnPostgres(t *testing.T) {
	pool, engine := engineWithFollowers(t, testenv.FollowersNoFollowedAtDDL)
	h := newHarness(t, engine, nil)

	_, err := h.apply(applyInput(followed("e1", "user-1", "artist-9"), 1))
	ae, attempts := applicationError(t, err)
	require.Equal(t, "sql", ae.Type())
	require.False(t, ae.NonRetryable())
	const msg = `column "followed_at" of relation "artist_followers" does not exist`
	require.Equal(t, msg, ae.Message())
	require.Len(t, attempts, 1)
	require.Equal(t, contract.Attempt{Number: 1, StartedAt: attempts[0].StartedAt, ErrorKind: "sql", Error: msg, IRVersion: 1}, attempts[0])

	require.Zero(t, rowCount(t, pool))
	require.Zero(t, ledgerRows(t, pool, "e1"))
	require.Equal(t, 1.0, counter(t, h.reg, retriesTotal, map[string]string{"projection": projectionName, "error_kind": "sql"}))
	line := onlyLine(t, h.logs, "projection_retry")
	require.Equal(t, msg, line["error"])
	require.Equal(t, "1s", line["nextRetryIn"])

	// Once the column is added, the next attempt applies the event.
	_, err = pool.Exec(context.Background(), `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err)
	out, err := h.apply(applyInput(followed("e1", "user-1", "artist-9"), 2))
	require.NoError(t, err)
	require.Equal(t, 2, out.Attempt)
	require.Equal(t, map[string]time.Time{"user-1/artist-9": occurred}, testenv.Followers(t, context.Background(), pool))
	require.Equal(t, 1, ledgerRows(t, pool, "e1"))
}

// A projection that is not deployed fails as ir_eval (retryable: it may be
// deployed before the next attempt) and writes nothing.
func TestApplyProjectionUndeployedOnPostgres(t *testing.T) {
	pool, engine := engineWithFollowers(t, mustDDL(t, projectionName))
	h := newHarness(t, engine, nil)
	in := applyInput(followed("e1", "user-1", "artist-9"), 1)
	in.Projection = "not_deployed"
	_, err := h.apply(in)
	ae, _ := applicationError(t, err)
	require.Equal(t, "ir_eval", ae.Type())
	require.False(t, ae.NonRetryable())
	require.ErrorContains(t, ae, "projection is not deployed")
	require.Zero(t, rowCount(t, pool))
	require.Equal(t, 1.0, counter(t, h.reg, retriesTotal, map[string]string{"projection": "not_deployed", "error_kind": "ir_eval"}))
}

func mustDDL(t *testing.T, name string) string {
	t.Helper()
	ddl, err := exampleprojections.DDL(name)
	require.NoError(t, err)
	return ddl
}

// scriptedApplier fails its first call by overrunning the attempt's
// timeout, its second with a SQL error, and applies on the third.
type scriptedApplier struct {
	mu    sync.Mutex
	calls int
	// skipOverrun starts the script at its second call: the first fails.
	skipOverrun bool
}

func (s *scriptedApplier) ApplyWith(ctx context.Context, name string, ev event.Envelope, _ projection.ApplyOptions) (projection.Result, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	if s.skipOverrun {
		n++
	}
	s.mu.Unlock()
	switch n {
	case 1:
		<-ctx.Done()
		// Report only well after the server has timed the attempt out.
		time.Sleep(time.Second)
		return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusFailed}, ctx.Err()
	case 2:
		return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusFailed, IRVersion: 1,
			Err: &projection.ApplyError{Kind: contract.KindSQL, Err: errors.New("duplicate key value violates unique constraint")}}, nil
	}
	return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusApplied, IRVersion: 1}, nil
}

const applyWorkflowName = "ActivitiesTestApply"

// applyWorkflow runs ApplyProjection with a short timeout and three activity
// attempts, as the retry workflow runs it with its schedule.
func applyWorkflow(ctx workflow.Context, in contract.ApplyInput) (contract.ApplyOutput, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1,
			MaximumAttempts: 3, NonRetryableErrorTypes: contract.NonRetryableErrorTypes},
	})
	var out contract.ApplyOutput
	err := workflow.ExecuteActivity(ctx, contract.ApplyProjectionActivity, in).Get(ctx, &out)
	return out, err
}

// On a real server, each attempt's record reaches the next attempt through
// the heartbeat details: an attempt that overran its timeout (it had
// recorded itself before running) is reported as timed out, a failed one
// with its error, and the success returns them all.
func TestApplyProjectionOnTemporalCarriesAttemptsAcrossRetries(t *testing.T) {
	srv := testenv.Temporal(t)
	tq := testenv.TaskQueue(t)
	applier := &scriptedApplier{}
	a := &activities.Activities{Applier: applier, Logger: slog.New(slog.DiscardHandler)}
	w := sdkworker.New(srv.Client, tq, sdkworker.Options{})
	w.RegisterActivityWithOptions(a.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	w.RegisterWorkflowWithOptions(applyWorkflow, workflow.RegisterOptions{Name: applyWorkflowName})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tq + "-apply", TaskQueue: tq},
		applyWorkflowName, applyInput(followed("e1", "user-1", "artist-9"), 1))
	require.NoError(t, err)
	var out contract.ApplyOutput
	require.NoError(t, run.Get(ctx, &out))

	require.Equal(t, 3, applier.calls)
	require.Equal(t, 3, out.Attempt)
	require.Len(t, out.Attempts, 2)
	first, second := out.Attempts[0], out.Attempts[1]
	require.Equal(t, 1, first.Number)
	require.Equal(t, "sql", first.ErrorKind)
	require.Equal(t, "attempt timed out after 1m0s", first.Error)
	require.Equal(t, 2, second.Number)
	require.Equal(t, "sql", second.ErrorKind)
	require.Equal(t, "duplicate key value violates unique constraint", second.Error)
	require.Equal(t, 1, second.IRVersion)
	require.True(t, first.StartedAt.Before(second.StartedAt))
	require.True(t, second.StartedAt.Before(out.StartedAt))
	require.GreaterOrEqual(t, second.StartedAt.Sub(first.StartedAt), 2*time.Second, "attempt 2 started after attempt 1 timed out")
}

// An attempt the server hands to a worker that never runs it (a poll answered
// into a closing connection, a worker killed as it received the task) leaves
// no record of its own: the next attempt records it as lost, so the run's
// attempts show every attempt the server made.
func TestApplyProjectionOnTemporalRecordsAnAttemptLostBeforeItStarted(t *testing.T) {
	srv := testenv.Temporal(t)
	tq := testenv.TaskQueue(t)
	workflows := sdkworker.New(srv.Client, tq, sdkworker.Options{LocalActivityWorkerOnly: true})
	workflows.RegisterWorkflowWithOptions(applyWorkflow, workflow.RegisterOptions{Name: applyWorkflowName})
	require.NoError(t, workflows.Start())
	t.Cleanup(workflows.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tq + "-apply", TaskQueue: tq},
		applyWorkflowName, applyInput(followed("e1", "user-1", "artist-9"), 1))
	require.NoError(t, err)

	// A poller that takes attempt 1 and never runs it.
	task, err := srv.Client.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: srv.Namespace, TaskQueue: &taskqueuepb.TaskQueue{Name: tq, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		Identity: "a worker that never runs its task"})
	require.NoError(t, err)
	require.EqualValues(t, 1, task.GetAttempt())

	applier := &scriptedApplier{skipOverrun: true}
	a := &activities.Activities{Applier: applier, Logger: slog.New(slog.DiscardHandler)}
	runner := sdkworker.New(srv.Client, tq, sdkworker.Options{})
	runner.RegisterActivityWithOptions(a.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	require.NoError(t, runner.Start())
	t.Cleanup(runner.Stop)

	var out contract.ApplyOutput
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, 2, applier.calls, "attempts 2 and 3 ran")
	require.Equal(t, 3, out.Attempt)
	require.Len(t, out.Attempts, 2, "attempts 1 and 2 before the one that succeeded")
	require.Equal(t, []contract.Attempt{
		{Number: 1, ErrorKind: string(contract.KindSQL), Error: contract.LostBeforeStarting},
		{Number: 2, StartedAt: out.Attempts[1].StartedAt, ErrorKind: string(contract.KindSQL),
			Error: "duplicate key value violates unique constraint", IRVersion: 1},
	}, out.Attempts)
	require.False(t, out.Attempts[1].StartedAt.IsZero())
}
