package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/internal/testenv"
)

func env(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func secs(fs ...float64) []time.Duration {
	out := make([]time.Duration, len(fs))
	for i, f := range fs {
		out[i] = time.Duration(f * float64(time.Second))
	}
	return out
}

func TestDefaults(t *testing.T) {
	c, err := Load(env())
	require.NoError(t, err)
	require.Equal(t, DefaultRetry(), c.Retry)
	require.Equal(t, []string{"127.0.0.1:9092"}, c.KafkaBrokers)
	require.Equal(t, "causet.events.v1", c.EventsTopic)
	require.Equal(t, "causet.projection-dlq.v1", c.DLQTopic)
	require.Equal(t, "causet-projection-worker", c.ConsumerGroup)
	require.Equal(t, "causet-projections", c.TaskQueue)
	require.Equal(t, ModeInline, c.BridgeMode)
	require.Equal(t, OrderingEntity, c.Ordering)
	require.Equal(t, 168*time.Hour, c.DLQReplayWindow)
	require.Equal(t, "127.0.0.1:9464", c.MetricsAddr)
	require.EqualValues(t, DefaultParkedMaxPerKey, c.ParkedMaxPerKey)
	require.EqualValues(t, DefaultParkedMaxPerPartition, c.ParkedMaxPerPartition)
	require.EqualValues(t, DefaultIRCostLimit, c.IRCostLimit)
	require.EqualValues(t, 256<<20, c.BridgeMaxBufferedBytes)
	require.Empty(t, c.BridgeInstanceID, "dynamic group membership unless set")
	require.Equal(t, 336*time.Hour, c.DedupeHorizon)
	require.Empty(t, c.DatabaseURL)
	require.Error(t, c.RequireDatabaseURL())
}

func TestDedupeHorizonFollowsTheReplayWindow(t *testing.T) {
	c, err := Load(env("CAUSET_DLQ_REPLAY_WINDOW", "1h", "CAUSET_DEDUPE_HORIZON", "2h"))
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, c.DedupeHorizon)
	_, err = Load(env("CAUSET_DLQ_REPLAY_WINDOW", "400h"))
	require.ErrorContains(t, err, "CAUSET_DEDUPE_HORIZON=336h0m0s is shorter than CAUSET_DLQ_REPLAY_WINDOW=400h0m0s")
}

func TestScheduleFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     Lookup
		offsets []time.Duration
		delays  []time.Duration
	}{
		{"defaults", env(), secs(0, 1, 3, 7, 15), secs(1, 2, 4, 8)},
		{"1500ms x1.5 max 3s", env(
			"PROJECTION_WORKER_RETRY_INITIAL_MS", "1500",
			"PROJECTION_WORKER_RETRY_MULTIPLIER", "1.5",
			"PROJECTION_WORKER_RETRY_MAX_MS", "3000",
		), secs(0, 1.5, 3.75, 6.75, 9.75), secs(1.5, 2.25, 3, 3)},
		{"single attempt", env("PROJECTION_WORKER_MAX_RETRIES", "1"), secs(0), nil},
		{"capped at 30s", env("PROJECTION_WORKER_MAX_RETRIES", "8"), secs(0, 1, 3, 7, 15, 31, 61, 91), secs(1, 2, 4, 8, 16, 30, 30)},
		{"multiplier 1", env("PROJECTION_WORKER_MAX_RETRIES", "3", "PROJECTION_WORKER_RETRY_MULTIPLIER", "1"), secs(0, 1, 2), secs(1, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.env)
			require.NoError(t, err)
			for _, mode := range []Mode{ModeInline, ModeWorkflow} {
				p := c.Retry.Plan(mode)
				require.Equal(t, tc.offsets, p.Offsets, mode)
				require.Equal(t, tc.delays, p.Delays, mode)
				require.Equal(t, tc.offsets, simulateTemporal(p), "wall-clock schedule in %s mode", mode)
			}
		})
	}
}

// simulateTemporal computes when each overall attempt starts the way the
// Temporal server schedules activity retries: wait FirstWait, then attempt n of
// the activity waits min(Initial*Coefficient^(n-1), Max) after attempt n-1.
func simulateTemporal(p Plan) []time.Duration {
	out := []time.Duration{0}
	if p.Policy == nil {
		return out
	}
	at := p.FirstWait
	if p.FirstActivityAttempt == 2 {
		out = append(out, at)
	}
	interval := float64(p.Policy.InitialInterval)
	for n := 2; n <= int(p.Policy.MaximumAttempts); n++ {
		at += min(time.Duration(interval), p.Policy.MaximumInterval)
		out = append(out, at)
		interval *= p.Policy.BackoffCoefficient
	}
	return out
}

func TestPolicyFields(t *testing.T) {
	r := DefaultRetry()
	w := r.Plan(ModeWorkflow)
	require.Equal(t, 1, w.FirstActivityAttempt)
	require.Zero(t, w.FirstWait)
	require.Equal(t, time.Second, w.Policy.InitialInterval)
	require.Equal(t, 2.0, w.Policy.BackoffCoefficient)
	require.Equal(t, 30*time.Second, w.Policy.MaximumInterval)
	require.EqualValues(t, 5, w.Policy.MaximumAttempts)

	in := r.Plan(ModeInline)
	require.Equal(t, 2, in.FirstActivityAttempt)
	require.Equal(t, time.Second, in.FirstWait)
	require.Equal(t, 2*time.Second, in.Policy.InitialInterval)
	require.EqualValues(t, 4, in.Policy.MaximumAttempts)

	one := Retry{MaxAttempts: 1, Initial: time.Second, Multiplier: 2, Max: time.Second}
	require.Nil(t, one.Plan(ModeInline).Policy, "inline mode with one attempt leaves nothing to retry")
	require.EqualValues(t, 1, one.Plan(ModeWorkflow).Policy.MaximumAttempts)

	d, ok := in.NextDelay(3)
	require.True(t, ok)
	require.Equal(t, 4*time.Second, d)
	_, ok = in.NextDelay(5)
	require.False(t, ok)
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		key, value, want string
	}{
		{"PROJECTION_WORKER_MAX_RETRIES", "abc", `PROJECTION_WORKER_MAX_RETRIES="abc" is invalid: want an integer from 1 to 100`},
		{"PROJECTION_WORKER_MAX_RETRIES", "0", `PROJECTION_WORKER_MAX_RETRIES="0" is invalid`},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "-5", `PROJECTION_WORKER_RETRY_INITIAL_MS="-5" is invalid: want a whole number of milliseconds`},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "1.5", `PROJECTION_WORKER_RETRY_INITIAL_MS="1.5" is invalid`},
		// Temporal runs a delay under 1s as up to about 1s (see
		// MinRetryDelay): such delays are refused, not silently stretched.
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "1", `PROJECTION_WORKER_RETRY_INITIAL_MS=1 is invalid: want at least 1000 (Temporal stretches shorter activity retries and timers to as much as 1s)`},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "200", `PROJECTION_WORKER_RETRY_INITIAL_MS=200 is invalid: want at least 1000 (Temporal stretches shorter activity retries and timers to as much as 1s)`},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "999", `PROJECTION_WORKER_RETRY_INITIAL_MS=999 is invalid: want at least 1000`},
		{"PROJECTION_WORKER_RETRY_MULTIPLIER", "0.5", `PROJECTION_WORKER_RETRY_MULTIPLIER="0.5" is invalid: want a number from 1 to 100`},
		{"PROJECTION_WORKER_RETRY_MULTIPLIER", "NaN", `PROJECTION_WORKER_RETRY_MULTIPLIER="NaN" is invalid`},
		{"PROJECTION_WORKER_RETRY_MAX_MS", "500", `PROJECTION_WORKER_RETRY_MAX_MS=500 is invalid: want at least PROJECTION_WORKER_RETRY_INITIAL_MS (1000)`},
		{"KAFKA_BROKERS", "localhost", `KAFKA_BROKERS="localhost" is invalid: want comma-separated host:port seeds`},
		{"KAFKA_BROKERS", " , ", `KAFKA_BROKERS="," is invalid`},
		{"CAUSET_BRIDGE_MODE", "fast", `CAUSET_BRIDGE_MODE="fast" is invalid: want one of inline, workflow`},
		{"CAUSET_ORDERING", "global", `CAUSET_ORDERING="global" is invalid: want one of entity, none`},
		{"CAUSET_DLQ_REPLAY_WINDOW", "7d", `CAUSET_DLQ_REPLAY_WINDOW="7d" is invalid: want a positive Go duration`},
		{"CAUSET_DLQ_REPLAY_WINDOW", "-1h", `CAUSET_DLQ_REPLAY_WINDOW="-1h" is invalid`},
		{"CAUSET_EVENTS_TOPIC", "", `CAUSET_EVENTS_TOPIC="" is invalid: want a non-empty name`},
		{"CAUSET_BRIDGE_MAX_INFLIGHT", "0", `CAUSET_BRIDGE_MAX_INFLIGHT="0" is invalid`},
		{"CAUSET_METRICS_ADDR", "9464", `CAUSET_METRICS_ADDR="9464" is invalid: want host:port`},
		{"CAUSET_PARKED_MAX_PER_KEY", "0", `CAUSET_PARKED_MAX_PER_KEY="0" is invalid: want an integer from 1 to 1000000000`},
		{"CAUSET_PARKED_MAX_PER_PARTITION", "x", `CAUSET_PARKED_MAX_PER_PARTITION="x" is invalid: want an integer from 1 to 1000000000`},
		{"CAUSET_LANE_MAX_QUEUED", "1000", `CAUSET_LANE_MAX_QUEUED="1000" is no longer read: ordering lanes are gone`},
		{"CAUSET_AUTO_MIGRATE", "yes", `CAUSET_AUTO_MIGRATE="yes" is invalid: want true or false`},
		{"CAUSET_IR_COST_LIMIT", "10", `CAUSET_IR_COST_LIMIT="10" is invalid: want an integer from 1000`},
		{"CAUSET_BRIDGE_MAX_BUFFERED_BYTES", "256MiB", `CAUSET_BRIDGE_MAX_BUFFERED_BYTES="256MiB" is invalid: want a number of bytes`},
		{"CAUSET_BRIDGE_INSTANCE_ID", "bridge 1", `CAUSET_BRIDGE_INSTANCE_ID="bridge 1" is invalid: want at most 249`},
		{"CAUSET_DEDUPE_HORIZON", "14d", `CAUSET_DEDUPE_HORIZON="14d" is invalid: want a positive Go duration`},
		{"CAUSET_DEDUPE_HORIZON", "24h", `CAUSET_DEDUPE_HORIZON=24h0m0s is shorter than CAUSET_DLQ_REPLAY_WINDOW=168h0m0s`},
		{"KAFKA_TLS", "yes", `KAFKA_TLS="yes" is invalid: want true or false`},
		{"KAFKA_SASL_PASSWORD", "hunter2", `KAFKA_SASL_PASSWORD is set but KAFKA_SASL_MECHANISM is not`},
	}
	for _, tc := range tests {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			_, err := Load(env(tc.key, tc.value))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestRetryFloor pins the 1s floor on the schedule that showed it: Temporal
// ran INITIAL_MS=200, MAX_MS=500 as attempts at 0, 1, 2 s, not 0, 0.2, 0.7 s.
func TestRetryFloor(t *testing.T) {
	_, err := Load(env(
		"PROJECTION_WORKER_MAX_RETRIES", "3",
		"PROJECTION_WORKER_RETRY_INITIAL_MS", "200",
		"PROJECTION_WORKER_RETRY_MULTIPLIER", "3",
		"PROJECTION_WORKER_RETRY_MAX_MS", "500",
	))
	require.EqualError(t, err, "PROJECTION_WORKER_RETRY_INITIAL_MS=200 is invalid: want at least 1000 "+
		"(Temporal stretches shorter activity retries and timers to as much as 1s)")

	for _, initial := range []time.Duration{0, -time.Second, time.Millisecond, MinRetryDelay - time.Millisecond} {
		r := Retry{MaxAttempts: 3, Initial: initial, Multiplier: 2, Max: 30 * time.Second}
		require.ErrorContains(t, r.Validate(), "want at least 1000", initial)
	}
	// Max below the floor is caught as Max < Initial.
	_, err = Load(env("PROJECTION_WORKER_RETRY_MAX_MS", "500"))
	require.ErrorContains(t, err, "PROJECTION_WORKER_RETRY_MAX_MS=500 is invalid")

	// The floor itself, non-whole seconds and MAX_RETRIES=1 with the floor are fine.
	for _, kv := range [][]string{
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "1000", "PROJECTION_WORKER_RETRY_MAX_MS", "1000"},
		{"PROJECTION_WORKER_RETRY_INITIAL_MS", "1500", "PROJECTION_WORKER_RETRY_MULTIPLIER", "1.5"},
		{"PROJECTION_WORKER_MAX_RETRIES", "1", "PROJECTION_WORKER_RETRY_INITIAL_MS", "1000"},
	} {
		_, err := Load(env(kv...))
		require.NoError(t, err, kv)
	}
	for _, mode := range []Mode{ModeInline, ModeWorkflow} {
		for _, d := range DefaultRetry().Plan(mode).Delays {
			require.GreaterOrEqual(t, d, MinRetryDelay)
		}
	}
}

// planRunInput is planRunWorkflow's input.
type planRunInput struct {
	Retry Retry
	Mode  Mode
	// Attempt1 is when attempt 1 started outside the workflow (inline mode).
	Attempt1 time.Time
}

// planRunWorkflow runs a Plan the way ProjectionRetryWorkflow does: in inline
// mode it sleeps until Attempt1+FirstWait, then it runs one activity with the
// plan's retry policy and lets Temporal time the rest. The activity always
// fails, so every planned attempt runs.
func planRunWorkflow(ctx workflow.Context, in planRunInput) error {
	plan := in.Retry.Plan(in.Mode)
	if plan.FirstWait > 0 {
		if wait := in.Attempt1.Add(plan.FirstWait).Sub(workflow.Now(ctx)); wait > 0 {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    plan.Policy.InitialInterval,
			BackoffCoefficient: plan.Policy.BackoffCoefficient,
			MaximumInterval:    plan.Policy.MaximumInterval,
			MaximumAttempts:    plan.Policy.MaximumAttempts,
		},
	})
	err := workflow.ExecuteActivity(actx, "PlanRunFail").Get(ctx, nil)
	if err == nil {
		return errors.New("PlanRunFail succeeded")
	}
	return nil
}

// TestTemporalRunsAllowedScheduleAsPlanned proves, against a real Temporal
// server, that a schedule Validate accepts runs as Plan says: every delay
// between two attempts' starts is within 50 ms of the planned one. The
// schedule sits at the floor (INITIAL_MS=1000) and has a non-whole-second
// delay (1500 ms): the server neither stretches the floor nor rounds to whole
// seconds. (Below the floor it would: see MinRetryDelay.)
func TestTemporalRunsAllowedScheduleAsPlanned(t *testing.T) {
	srv := testenv.Temporal(t)
	tq := testenv.TaskQueue(t)

	var mu sync.Mutex
	starts := map[string][]time.Time{}
	w := worker.New(srv.Client, tq, worker.Options{})
	w.RegisterWorkflow(planRunWorkflow)
	w.RegisterActivityWithOptions(func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		id := activity.GetInfo(ctx).WorkflowExecution.ID
		starts[id] = append(starts[id], time.Now())
		return errors.New("projection failed")
	}, activity.RegisterOptions{Name: "PlanRunFail"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	ranStarts := func(t *testing.T, r Retry, mode Mode) []time.Time {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id := testenv.TaskQueue(t) // unique per subtest
		attempt1 := time.Now()     // inline mode: the bridge's attempt 1 starts now
		run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: tq},
			planRunWorkflow, planRunInput{Retry: r, Mode: mode, Attempt1: attempt1})
		require.NoError(t, err)
		require.NoError(t, run.Get(ctx, nil))
		mu.Lock()
		defer mu.Unlock()
		got := append([]time.Time(nil), starts[id]...)
		if mode == ModeInline {
			got = append([]time.Time{attempt1}, got...)
		}
		require.Len(t, got, r.MaxAttempts)
		return got
	}

	// Why the floor: the dev server runs a sub-second schedule (bypassing
	// Validate) late. How late depends on when the server last read its task
	// queues; right after attempt 1 was dispatched the first delay runs as
	// about 1s.
	t.Run("below the floor", func(t *testing.T) {
		if os.Getenv("TEMPORAL_ADDRESS") != "" {
			t.Skip("the floor is the dev server's default history.timerProcessorMaxTimeShift")
		}
		short := Retry{MaxAttempts: 3, Initial: 200 * time.Millisecond, Multiplier: 3, Max: 500 * time.Millisecond}
		got := ranStarts(t, short, ModeWorkflow)
		for k, want := range short.Plan(ModeWorkflow).Delays {
			t.Logf("delay after attempt %d: planned %v, ran %v", k+1, want, got[k+1].Sub(got[k]))
		}
		require.Greater(t, got[1].Sub(got[0]), MinRetryDelay-200*time.Millisecond,
			"Temporal kept a 200ms retry delay: if the server no longer stretches sub-second delays, Validate may allow them")
	})

	r := Retry{MaxAttempts: 4, Initial: MinRetryDelay, Multiplier: 1.5, Max: 2 * time.Second}
	require.NoError(t, r.Validate())
	// The slack covers a loaded 2-core CI machine (other test binaries,
	// a browser) delaying the start and the worker's poll; how close to
	// plan the schedule runs is measured by the bench (lateness_max).
	const slack = 200 * time.Millisecond
	for _, mode := range []Mode{ModeInline, ModeWorkflow} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			plan := r.Plan(mode)
			require.Equal(t, secs(0, 1, 2.5, 4.5), plan.Offsets)
			got := ranStarts(t, r, mode)
			ran := make([]time.Duration, len(got))
			for k, at := range got {
				ran[k] = at.Sub(got[0])
			}
			t.Logf("%s mode: planned %v, ran %v", mode, plan.Offsets, ran)
			for k, want := range plan.Delays {
				delay := got[k+1].Sub(got[k])
				require.InDelta(t, want, delay, float64(slack), "delay after attempt %d: planned %v, ran %v", k+1, want, delay)
			}
		})
	}
}

func TestLinkTimeout(t *testing.T) {
	c, err := Load(env())
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, c.LinkTimeout, "the default")
	c, err = Load(env("CAUSET_LINK_TIMEOUT", "5s"))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.LinkTimeout)
	for _, bad := range []string{"1s", "6m", "soon", "-3s"} {
		_, err := Load(env("CAUSET_LINK_TIMEOUT", bad))
		require.EqualError(t, err, fmt.Sprintf(`CAUSET_LINK_TIMEOUT=%q is invalid: want a Go duration from 2s to 5m0s, such as 15s`, bad))
	}
}
