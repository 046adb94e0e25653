package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	require.Equal(t, DefaultLaneMaxQueued, c.LaneMaxQueued)
	require.EqualValues(t, DefaultIRCostLimit, c.IRCostLimit)
	require.EqualValues(t, 256<<20, c.BridgeMaxBufferedBytes)
	require.Empty(t, c.BridgeInstanceID, "dynamic group membership unless set")
	require.Empty(t, c.DatabaseURL)
	require.Error(t, c.RequireDatabaseURL())
}

func TestScheduleFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     Lookup
		offsets []time.Duration
		delays  []time.Duration
	}{
		{"defaults", env(), secs(0, 1, 3, 7, 15), secs(1, 2, 4, 8)},
		{"500ms x3 max 2s", env(
			"PROJECTION_WORKER_RETRY_INITIAL_MS", "500",
			"PROJECTION_WORKER_RETRY_MULTIPLIER", "3",
			"PROJECTION_WORKER_RETRY_MAX_MS", "2000",
		), secs(0, 0.5, 2, 4, 6), secs(0.5, 1.5, 2, 2)},
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
	require.Equal(t, []string{"invalid_event"}, w.Policy.NonRetryableErrorTypes)

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
		{"CAUSET_LANE_MAX_QUEUED", "0", `CAUSET_LANE_MAX_QUEUED="0" is invalid: want an integer from 1 to 100000`},
		{"CAUSET_IR_COST_LIMIT", "10", `CAUSET_IR_COST_LIMIT="10" is invalid: want an integer from 1000`},
		{"CAUSET_BRIDGE_MAX_BUFFERED_BYTES", "256MiB", `CAUSET_BRIDGE_MAX_BUFFERED_BYTES="256MiB" is invalid: want a number of bytes`},
		{"CAUSET_BRIDGE_INSTANCE_ID", "bridge 1", `CAUSET_BRIDGE_INSTANCE_ID="bridge 1" is invalid: want at most 249`},
		{"CAUSET_BRIDGE_MODE", "workflow", `CAUSET_BRIDGE_MODE=workflow cannot keep entity order: set CAUSET_ORDERING=none`},
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
