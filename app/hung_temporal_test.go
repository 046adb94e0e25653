package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/enums/v1"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

// A peer in front of the Temporal frontend (a proxy or load balancer that
// lost its flows) stops answering for 40 s while failing events arrive: the
// bridge's starts and the worker's polls ride on connections that stay
// open and acknowledged but silent for good, and new connections are
// served after. Meanwhile the failure clears (the missing column is
// added). Within 30 s of the peer answering, every failing event has its
// one retry workflow, completed, and is applied; nothing is dead-lettered.
func TestServiceKafkaRetriesThroughAHungTemporalProxy(t *testing.T) {
	const hangFor = 40 * time.Second
	srv := testenv.Temporal(t)
	peer := testenv.NewHungPeer(t, srv.HostPort)
	brokers := testenv.Kafka(t)
	env, topic, _ := consumerEnv(t, brokers, map[string]string{
		"PROJECTION_WORKER_MAX_RETRIES":      "10",
		"PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MAX_MS":     "2000",
	})
	cfg := load(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	svc, err := app.Open(ctx, cfg, app.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))), app.WithTemporalAddress(peer.Addr),
		withFollowers(testenv.FollowersNoFollowedAtDDL))
	require.NoError(t, err)
	defer svc.Close()
	w, err := svc.NewWorker()
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()
	stopBridge, done := runBridge(t, ctx, svc)
	defer func() {
		stopBridge()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("bridge did not stop")
		}
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer prod.Close()
	prefix := testenv.Topic(t, "hung")
	var ids []string
	produce := func(n int) {
		for range n {
			id := fmt.Sprintf("%s-%d", prefix, len(ids))
			user := "user-" + id
			ev := `{"eventId":"` + id + `","eventType":"ARTIST_FOLLOWED","entityId":"` + user + `","forkId":"production",` +
				`"occurredAt":"2026-01-02T03:04:05Z","payload":{"artistId":"artist-9"}}`
			require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Key: []byte(user), Value: []byte(ev)}).FirstErr())
			ids = append(ids, id)
		}
	}
	status := func(id string) enums.WorkflowExecutionStatus {
		d, err := srv.DescribeWorkflow(contract.RetryWorkflowID("artist_followers", "production", id))
		if err != nil {
			return enums.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED
		}
		return d.WorkflowExecutionInfo.Status
	}
	produce(10)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if status(id) != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
				return false
			}
		}
		return true
	}, time.Minute, 200*time.Millisecond, "a retry workflow per failing event before the hang")

	peer.Hang()
	hung := time.Now()
	produce(10)
	time.Sleep(hangFor / 2)
	_, err = svc.Pool.Exec(ctx, `ALTER TABLE artist_followers ADD COLUMN followed_at timestamptz`)
	require.NoError(t, err, "the fix")
	time.Sleep(time.Until(hung.Add(hangFor)))
	peer.Answer()
	answered := time.Now()

	if !assertEventually(t, func() bool { return len(testenv.Followers(t, ctx, svc.Pool)) == len(ids) }, 30*time.Second) {
		got := map[string]string{}
		for _, id := range ids {
			d, err := srv.DescribeWorkflow(contract.RetryWorkflowID("artist_followers", "production", id))
			if err != nil {
				got[id] = err.Error()
				continue
			}
			got[id] = d.WorkflowExecutionInfo.Status.String()
			for _, pa := range d.PendingActivities {
				got[id] += fmt.Sprintf(" [%s %s attempt %d scheduled %s started %s]", pa.ActivityType.GetName(), pa.State,
					pa.Attempt, pa.LastAttemptCompleteTime.AsTime().Format("15:04:05"), pa.LastStartedTime.AsTime().Format("15:04:05"))
			}
			if d.PendingWorkflowTask != nil {
				got[id] += fmt.Sprintf(" [workflow task %s attempt %d]", d.PendingWorkflowTask.State, d.PendingWorkflowTask.Attempt)
			}
		}
		t.Fatalf("within 30 s of the peer answering, %d of %d failing events applied; workflows: %v", len(testenv.Followers(t, ctx, svc.Pool)), len(ids), got)
	}
	t.Logf("%d failing events applied %.1f s after the peer served new connections again", len(ids), time.Since(answered).Seconds())
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if status(id) != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return false
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "every event's one retry workflow completed")
	dead, errs := testenv.ReadTopic(t, ctx, brokers, cfg.DLQTopic)
	require.Empty(t, errs)
	require.Empty(t, dead, "nothing dead-lettered")
}

// assertEventually polls cond every 200 ms until it holds (true) or within
// has passed (false).
func assertEventually(t *testing.T, cond func() bool, within time.Duration) bool {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
