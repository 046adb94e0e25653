package dlq_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
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

var fastRetry = config.Retry{MaxAttempts: 2, Initial: time.Second, Multiplier: 1, Max: time.Second}

// TestKafkaReplayEndToEnd dead-letters three events (one left open, one whose
// replay window expires, one discarded), deploys a fix and replays from the
// DLQ topic: the open run is signalled, the closed ones restarted, every row
// appears once; a second identical replay changes nothing.
func TestKafkaReplayEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, srv, brokers, dlqTopic, tq, deploy, startWorker := replayStack(t, ctx, 2)
	var err error
	w := startWorker()

	type tcase struct {
		name   string
		window time.Duration
		id     string
	}
	cases := []*tcase{{name: "open", window: time.Hour}, {name: "expired", window: 500 * time.Millisecond}, {name: "discarded", window: time.Hour}}
	for i, c := range cases {
		ev := event.Envelope{
			EventID: "ev-" + c.name + "-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-" + c.name, ForkID: "production",
			OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-9"}`),
		}
		in := contract.RetryInput{
			Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeWorkflow,
			Source: contract.Source{Topic: "causet.events.v1", Partition: 0, Offset: int64(i)},
			Retry:  fastRetry, ReplayWindow: c.window,
		}
		c.id = contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
		_, err := srv.Client.ExecuteWorkflow(ctx, dlq.RestartOptions(c.id, tq, in), contract.RetryWorkflowName, in)
		require.NoError(t, err)
	}
	open, expired, discarded := cases[0], cases[1], cases[2]

	waitFor := func(id string, ok func(dlq.WorkflowState) bool, what string) dlq.WorkflowState {
		t.Helper()
		var st dlq.WorkflowState
		require.Eventually(t, func() bool {
			st, err = dlq.LookupState(ctx, srv.Client, id)
			return err == nil && ok(st)
		}, 60*time.Second, 100*time.Millisecond, "%s never %s (last %+v, %v)", id, what, st, err)
		return st
	}
	deadLettered := func(s dlq.WorkflowState) bool { return s.Open && s.State == contract.StateDeadLettered }
	waitFor(open.id, deadLettered, "dead-lettered")
	waitFor(discarded.id, deadLettered, "dead-lettered")
	require.NoError(t, srv.Client.SignalWorkflow(ctx, discarded.id, "", contract.SignalDiscard, nil))
	st := waitFor(discarded.id, func(s dlq.WorkflowState) bool { return !s.Open }, "closed")
	require.Equal(t, contract.StateDiscarded, st.State)
	st = waitFor(expired.id, func(s dlq.WorkflowState) bool { return !s.Open }, "closed")
	require.Equal(t, contract.StateDeadLettered, st.State, "window expiry keeps the dead_lettered state")
	require.Equal(t, "dead_lettered (window expired)", st.String())

	rows := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM artist_followers`).Scan(&n))
		return n
	}
	require.Zero(t, rows())

	replay := func(dry, force bool) dlq.Summary {
		t.Helper()
		r, err := dlq.NewReader(ctx, dlq.ReaderOptions{Brokers: brokers, Topic: dlqTopic, Filter: dlq.Filter{Projection: "artist_followers"}})
		require.NoError(t, err)
		defer r.Close()
		rp, err := dlq.NewReplayer(dlq.ReplayerOptions{
			Client: srv.Client, TaskQueue: tq, Retry: fastRetry, ReplayWindow: time.Hour,
			Reason: "IR v2 drops followed_at", DryRun: dry, Rate: 50, Force: force,
		})
		require.NoError(t, err)
		require.NoError(t, r.Read(ctx, func(it dlq.Item) error {
			res, err := rp.Replay(ctx, it)
			if res.Outcome != dlq.Refused {
				require.NoError(t, res.Err)
			}
			return err
		}))
		return rp.Summary()
	}

	// The fix, then a dry run that only reports: without --force the
	// discarded dead letter stays discarded.
	deploy(testenv.FollowersFixedIR)
	require.Equal(t, dlq.Summary{Signalled: 1, Restarted: 1, Refused: 1}, replay(true, false))
	require.Equal(t, dlq.Summary{Signalled: 1, Restarted: 2}, replay(true, true))
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, rows())

	// With the worker down, the replay's signal and starts wait in
	// Temporal; a second replay meanwhile neither signals again nor starts
	// another run.
	w.Stop()
	require.Equal(t, dlq.Summary{Signalled: 1, Restarted: 2}, replay(false, true))
	require.Equal(t, dlq.Summary{AlreadySucceeded: 3}, replay(false, true))
	w = startWorker()
	t.Cleanup(w.Stop)
	succeeded := func(s dlq.WorkflowState) bool { return !s.Open && s.State == contract.StateSucceeded }
	runs := map[string]string{}
	for _, c := range cases {
		runs[c.id] = waitFor(c.id, succeeded, "succeeded").RunID
	}
	require.Equal(t, 3, rows())
	ledger := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM causet_projection_applied WHERE projection = 'artist_followers'`).Scan(&n))
		return n
	}
	require.Equal(t, 3, ledger())

	v, err := srv.Client.QueryWorkflow(ctx, open.id, "", contract.QueryStatus)
	require.NoError(t, err)
	var status contract.Status
	require.NoError(t, v.Get(&status))
	require.Equal(t, 1, status.ReplayCount)
	require.Equal(t, "IR v2 drops followed_at", status.LastReplayReason)

	// A second identical replay: nothing to do, no new run.
	require.Equal(t, dlq.Summary{AlreadySucceeded: 3}, replay(false, true))
	for _, c := range cases {
		st, err := dlq.LookupState(ctx, srv.Client, c.id)
		require.NoError(t, err)
		require.Equal(t, runs[c.id], st.RunID, "%s got a new run", c.name)
	}
	require.Equal(t, 3, rows())
	wantRuns := map[string]int{open.id: 1, expired.id: 2, discarded.id: 2}
	for id, want := range wantRuns {
		require.Eventually(t, func() bool {
			resp, err := srv.Client.ListWorkflow(ctx, listRequest(srv.Namespace, id))
			return err == nil && len(resp.GetExecutions()) == want
		}, 20*time.Second, 200*time.Millisecond, "%s should have %d run(s)", id, want)
	}
	require.Equal(t, 3, ledger())
	signals := 0
	it := srv.Client.GetWorkflowHistory(ctx, open.id, "", false, 0)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED {
			signals++
		}
	}
	require.Equal(t, 1, signals, "one replay signal for three replays")
}

func listRequest(namespace, id string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: `WorkflowId="` + id + `"`}
}

// TestKafkaReplayAtTheWindowsEnd replays a dead letter whose replay window's
// timer has fired while no worker runs: its workflow task is pending, and
// processing it would close the run as expired. The replayer, finding no
// replay queued, waits SettleWait, then signals anyway (and says so); the
// worker, back, takes the replay that arrived with the window's end and
// the event applies.
func TestKafkaReplayAtTheWindowsEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, srv, _, dlqTopic, tq, deploy, startWorker := replayStack(t, ctx, 1)
	var err error
	w := startWorker()

	ev := event.Envelope{
		EventID: "ev-window-" + tq, EventType: "ARTIST_FOLLOWED", EntityID: "user-window", ForkID: "production",
		OccurredAt: time.Now().UTC().Truncate(time.Second), Payload: []byte(`{"artistId":"artist-9"}`),
	}
	const window = 3 * time.Second
	in := contract.RetryInput{
		Event: ev, Projection: "artist_followers", Key: []byte(ev.EntityID), Mode: config.ModeWorkflow,
		Source: contract.Source{Topic: "causet.events.v1"}, Retry: fastRetry, ReplayWindow: window,
	}
	id := contract.RetryWorkflowID("artist_followers", ev.ForkID, ev.EventID)
	_, err = srv.Client.ExecuteWorkflow(ctx, dlq.RestartOptions(id, tq, in), contract.RetryWorkflowName, in)
	require.NoError(t, err)
	var st dlq.WorkflowState
	require.Eventually(t, func() bool {
		st, err = dlq.LookupState(ctx, srv.Client, id)
		return err == nil && st.Open && st.State == contract.StateDeadLettered && !st.PendingTask
	}, 60*time.Second, 100*time.Millisecond, "never dead-lettered: %+v %v", st, err)

	// The worker goes; the window's timer fires with no one to process it.
	w.Stop()
	require.Eventually(t, func() bool {
		st, err = dlq.LookupState(ctx, srv.Client, id)
		return err == nil && st.Open && st.PendingTask
	}, window+30*time.Second, 100*time.Millisecond, "the window's end left no pending task: %+v %v", st, err)

	deploy(testenv.FollowersFixedIR)
	rp, err := dlq.NewReplayer(dlq.ReplayerOptions{Client: srv.Client, TaskQueue: tq, Retry: fastRetry,
		SettleWait: time.Second, Reason: "at the window's end"})
	require.NoError(t, err)
	res, err := rp.Replay(ctx, dlq.Item{Topic: dlqTopic, Key: []byte(ev.EntityID), Record: dlq.Record{
		SchemaVersion: 1, ProjectionName: "artist_followers", Workflow: &dlq.WorkflowRef{ID: id}}})
	require.NoError(t, err)
	require.Equal(t, dlq.Signalled, res.Outcome, "the replay is sent, not taken as done: %+v", res)
	require.True(t, res.Unsettled, "and the replayer says the task was still pending")
	require.Equal(t, 1, rp.Summary().Unsettled)

	w = startWorker()
	t.Cleanup(w.Stop)
	require.Eventually(t, func() bool {
		st, err = dlq.LookupState(ctx, srv.Client, id)
		return err == nil && !st.Open
	}, 60*time.Second, 100*time.Millisecond, "the run never closed: %+v %v", st, err)
	require.Equal(t, contract.StateSucceeded, st.State, "the replay that arrived with the window's end was honoured")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM artist_followers`).Scan(&n))
	require.Equal(t, 1, n)
}

// replayStack is what the replay tests share: PostgreSQL with
// artist_followers lacking its followed_at column and the IR that writes it
// deployed (every follow fails), the Temporal dev server, Kafka with a DLQ
// topic of partitions, a task queue, deploy and a worker starter.
func replayStack(t *testing.T, ctx context.Context, partitions int32) (pool *pgxpool.Pool, srv testenv.TemporalServer, brokers []string,
	dlqTopic, tq string, deploy func(doc string), startWorker func() sdkworker.Worker) {
	t.Helper()
	pool = testenv.Postgres(t)
	srv = testenv.Temporal(t)
	brokers = testenv.Kafka(t)
	dlqTopic = testenv.Topic(t, "dlq")
	testenv.CreateTopic(t, brokers, dlqTopic, partitions)
	_, err := pool.Exec(ctx, testenv.FollowersNoFollowedAtDDL)
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	engine, err := projection.NewEngine(ctx, pool, logger)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	deploy = func(doc string) {
		d, err := projection.Parse([]byte(doc))
		require.NoError(t, err)
		_, err = projection.Deploy(ctx, pool, d)
		require.NoError(t, err)
	}
	deploy(testenv.FollowersIR)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	tq = testenv.TaskQueue(t)
	startWorker = func() sdkworker.Worker {
		w, err := worker.New(worker.Options{
			Client: srv.Client, TaskQueue: tq,
			Activities: &activities.Activities{Applier: engine, Publisher: &dlq.Publisher{Client: producer, Topic: dlqTopic}, Logger: logger},
		})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		return w
	}
	return pool, srv, brokers, dlqTopic, tq, deploy, startWorker
}
