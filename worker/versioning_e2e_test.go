package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/worker"
)

// buildApplier applies with the real engine and records, for one build,
// whether each attempt failed.
type buildApplier struct {
	engine *projection.Engine
	mu     sync.Mutex
	failed []bool
}

func (a *buildApplier) ApplyWith(ctx context.Context, name string, ev event.Envelope, opts projection.ApplyOptions) (projection.Result, error) {
	res, err := a.engine.ApplyWith(ctx, name, ev, opts)
	a.mu.Lock()
	a.failed = append(a.failed, err != nil || res.Err != nil)
	a.mu.Unlock()
	return res, err
}

func (a *buildApplier) attempts() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bool(nil), a.failed...)
}

// noDeadLetters fails the test if the retry workflow ever dead-letters.
type noDeadLetters struct{ t *testing.T }

func (p noDeadLetters) Publish(context.Context, []byte, dlq.Record) (contract.DLQCoordinates, error) {
	p.t.Errorf("unexpected dead letter")
	return contract.DLQCoordinates{}, nil
}

// TestWorkerVersioningRetryMovesToNewBuild: a retry workflow that failed on
// build v1 finishes on build v2 once v2 is the deployment's current version
// and v1 is gone, as an auto-upgrade workflow must.
func TestWorkerVersioningRetryMovesToNewBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, srv, tq := testenv.Postgres(t), testenv.Temporal(t), testenv.TaskQueue(t)
	_, err := pool.Exec(ctx, testenv.FollowersNoFollowedAtDDL)
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	engine, err := projection.NewEngine(ctx, pool, logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	deploy(t, ctx, pool, testenv.FollowersIR)

	deployment := tq
	// startBuild starts a worker as production does: the version read by
	// config, the registration of worker.New.
	startBuild := func(build string) (sdkworker.Worker, *buildApplier) {
		v, err := config.LoadWorkerVersioning(func(k string) (string, bool) {
			return map[string]string{"CAUSET_WORKER_DEPLOYMENT": deployment, "CAUSET_WORKER_BUILD_ID": build}[k], true
		})
		require.NoError(t, err)
		require.True(t, v.Enabled())
		c, err := client.NewClientFromExisting(srv.Client, client.Options{
			Namespace: srv.Namespace, Identity: "causet-worker-" + build, Logger: worker.SDKLogger(logger),
		})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		applier := &buildApplier{engine: engine}
		w, err := worker.New(worker.Options{
			Client: c, TaskQueue: tq,
			Activities: &activities.Activities{Applier: applier, Publisher: noDeadLetters{t}, Logger: logger},
			Version:    sdkworker.WorkerDeploymentVersion{DeploymentName: v.DeploymentName, BuildID: v.BuildID},
		})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		return w, applier
	}
	handle := srv.Client.WorkerDeploymentClient().GetHandle(deployment)
	setCurrent := func(build string) {
		// The version exists once its pollers have reached the server.
		require.Eventually(t, func() bool {
			_, err := handle.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
			if err != nil {
				t.Logf("set current version %s: %v", build, err)
			}
			return err == nil
		}, 60*time.Second, 500*time.Millisecond)
		d, err := handle.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		require.NoError(t, err)
		require.Equal(t, build, d.Info.RoutingConfig.CurrentVersion.BuildID)
	}

	w1, v1 := startBuild("v1")
	stopV1 := sync.OnceFunc(w1.Stop)
	t.Cleanup(stopV1)
	setCurrent("v1")

	ev := event.Envelope{
		EventID: "ev-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-1", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-9"}`),
	}
	in := contract.RetryInput{
		Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeWorkflow,
		Source: contract.Source{Topic: "causet.events.v1", Partition: 0, Offset: 1, Timestamp: time.Now().UTC()},
		// An attempt a second, long enough to outlast the deploy.
		Retry:        config.Retry{MaxAttempts: 100, Initial: time.Second, Multiplier: 1, Max: time.Second},
		ReplayWindow: time.Hour,
	}
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: in.WorkflowID(), TaskQueue: tq, TypedSearchAttributes: temporalAttrs(ev, in.Projection),
	}, contract.RetryWorkflowName, in)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(v1.attempts()) >= 2 }, 30*time.Second, 100*time.Millisecond,
		"the retry workflow never made two attempts on v1")
	// docs/PRODUCTION.md's query for the workflows still on a build.
	require.Eventually(t, func() bool {
		out, err := srv.CLI("workflow", "list", "--query",
			"TemporalWorkerDeploymentVersion='"+deployment+":v1' AND ExecutionStatus='Running'", "-o", "json")
		return err == nil && strings.Contains(out, run.GetID())
	}, 20*time.Second, 500*time.Millisecond)

	// The deploy, with docs/PRODUCTION.md's command: v2 starts, becomes current,
	// v1 stops; then the fix ships.
	w2, v2 := startBuild("v2")
	t.Cleanup(w2.Stop)
	require.Eventually(t, func() bool {
		_, err := srv.CLI("worker", "deployment", "set-current-version", "--deployment-name", deployment, "--build-id", "v2", "--yes")
		return err == nil
	}, 60*time.Second, 500*time.Millisecond)
	d, err := handle.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(t, err)
	require.Equal(t, "v2", d.Info.RoutingConfig.CurrentVersion.BuildID)
	stopV1()
	onV1 := v1.attempts()
	deploy(t, ctx, pool, testenv.FollowersFixedIR)

	var st contract.Status
	require.NoError(t, run.Get(ctx, &st))
	require.Equal(t, contract.StateSucceeded, st.State)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-1' AND artist_id = 'artist-9'`).Scan(&n))
	require.Equal(t, 1, n)

	// Every attempt on v1 failed; the successful one ran on v2.
	require.NotContains(t, onV1, false)
	require.Equal(t, onV1, v1.attempts(), "no attempt on v1 after it stopped")
	onV2 := v2.attempts()
	require.NotEmpty(t, onV2)
	require.False(t, onV2[len(onV2)-1], "the last attempt, on v2, succeeded")
	require.Len(t, st.Attempts, len(onV1)+len(onV2), "the status counts every attempt of both builds")

	// The history: workflow tasks completed first by v1, last by v2, all as
	// auto-upgrade; the activity's completed attempt was started by v2.
	var wftBuilds []string
	var activityIdentity string
	iter := srv.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			require.Equal(t, deployment, a.GetDeploymentVersion().GetDeploymentName())
			require.Equal(t, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE, a.GetVersioningBehavior())
			wftBuilds = append(wftBuilds, a.GetDeploymentVersion().GetBuildId())
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil {
			activityIdentity = a.GetIdentity()
		}
	}
	t.Logf("workflow tasks by build: %v; attempts on v1 %d, on v2 %d", wftBuilds, len(onV1), len(onV2))
	require.NotEmpty(t, wftBuilds)
	require.Equal(t, "v1", wftBuilds[0])
	require.Equal(t, "v2", wftBuilds[len(wftBuilds)-1])
	require.Equal(t, "causet-worker-v2", activityIdentity)

	desc, err := srv.Client.DescribeWorkflow(ctx, run.GetID(), run.GetRunID())
	require.NoError(t, err)
	vi := desc.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	require.Equal(t, enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE, vi.GetBehavior())
	require.Equal(t, "v2", vi.GetDeploymentVersion().GetBuildId())
}
