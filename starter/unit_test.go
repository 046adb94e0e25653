package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/backoff"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

func validOptions() Options {
	return Options{
		Brokers: []string{"127.0.0.1:9092"},
		Engine: EngineFunc{
			ProjectionsFunc: func(string) []string { return nil },
			ApplyBatchFunc:  func(context.Context, []event.Envelope) ([]projection.Result, error) { return nil, nil },
		},
		Starter:  newRecordingStarter(nil),
		Ordering: config.OrderingNone,
	}
}

func TestOptionsDefaultsAndValidate(t *testing.T) {
	o := validOptions()
	o.setDefaults()
	require.NoError(t, o.validate())
	require.Equal(t, "causet.events.v1", o.Topic)
	require.Equal(t, "causet-projection-worker", o.Group)
	require.Equal(t, "causet.projection-dlq.v1", o.DLQTopic)
	require.Equal(t, "causet-projections", o.TaskQueue)
	require.Equal(t, config.ModeInline, o.Mode)
	require.Equal(t, config.DefaultRetry(), o.Retry)
	require.Equal(t, 168*time.Hour, o.ReplayWindow)
	require.Equal(t, 256, o.MaxInflight)

	tests := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"no brokers", func(o *Options) { o.Brokers = nil }, "Brokers is required"},
		{"no engine", func(o *Options) { o.Engine = nil }, "Engine is required"},
		{"no starter", func(o *Options) { o.Starter = nil }, "Starter is required"},
		{"bad mode", func(o *Options) { o.Mode = "fast" }, `Mode "fast" is invalid`},
		{"dlq is source", func(o *Options) { o.DLQTopic = o.Topic }, "consume its own dead letters"},
		{"bad retry", func(o *Options) {
			o.Retry = config.Retry{MaxAttempts: 1, Initial: 2 * time.Second, Multiplier: 2, Max: time.Second}
		}, "PROJECTION_WORKER_RETRY_MAX_MS"},
		{"negative inflight", func(o *Options) { o.MaxInflight = -1 }, "MaxInflight -1"},
		{"entity ordering without parking", func(o *Options) { o.Ordering = config.OrderingEntity }, "Parking is required"},
		{"no parked bound", func(o *Options) { o.MaxParkedPerKey = -1 }, "MaxParkedPerKey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			o.setDefaults()
			tc.mutate(&o)
			err := o.validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.False(t, strings.Contains(err.Error(), "\n"))
		})
	}
	_, err := New(Options{})
	require.ErrorContains(t, err, "Brokers is required")
}

func TestOptionsFromConfig(t *testing.T) {
	c, err := config.Load(func(k string) (string, bool) {
		v, ok := map[string]string{"CAUSET_BRIDGE_MODE": "workflow", "CAUSET_ORDERING": "none", "CAUSET_BRIDGE_MAX_INFLIGHT": "7", "CAUSET_EVENTS_TOPIC": "ev"}[k]
		return v, ok
	})
	require.NoError(t, err)
	o := OptionsFromConfig(c)
	require.Equal(t, config.ModeWorkflow, o.Mode)
	require.Equal(t, 7, o.MaxInflight)
	require.Equal(t, "ev", o.Topic)
	require.Equal(t, c.Retry, o.Retry)
	require.Equal(t, c.DLQReplayWindow, o.ReplayWindow)
}

func TestStartOptionsContract(t *testing.T) {
	in := contract.RetryInput{Projection: "artist_followers", Event: followed("ev-1", "user-123", "artist-9")}
	o := StartOptions("tq", in)
	require.Equal(t, "projection-retry:artist_followers:production:ev-1", o.ID)
	require.Equal(t, "tq", o.TaskQueue)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, o.WorkflowIDReusePolicy)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, o.WorkflowIDConflictPolicy)
	sa := o.TypedSearchAttributes
	for key, want := range map[string]string{
		"CausetProjection": "artist_followers", "CausetEventType": "ARTIST_FOLLOWED",
		"CausetEntityId": "user-123", "CausetForkId": "production", "CausetRetryState": "retrying",
	} {
		var got string
		for k, v := range sa.GetUntypedValues() {
			if k.GetName() == key {
				got, _ = v.(string)
			}
		}
		require.Equal(t, want, got, key)
	}
}

type errStarter struct{ err error }

func (s errStarter) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, s.err
}

func TestStartRetryWorkflowAlreadyStartedIsHandedOff(t *testing.T) {
	in := contract.RetryInput{Projection: "p", Event: followed("e", "u", "a")}
	closed := serviceerror.NewWorkflowExecutionAlreadyStarted("closed run", "", "run-1")
	require.NoError(t, startRetryWorkflow(context.Background(), errStarter{closed}, "tq", in))
	require.NoError(t, startRetryWorkflow(context.Background(), errStarter{errors.Join(errors.New("wrapped"), closed)}, "tq", in))
	require.Error(t, startRetryWorkflow(context.Background(), errStarter{serviceerror.NewUnavailable("down")}, "tq", in))
}

func TestBackoffCapped(t *testing.T) {
	b := &backoff.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	var last time.Duration
	for range 20 {
		last = b.Next()
		require.LessOrEqual(t, last, 1200*time.Millisecond)
		require.GreaterOrEqual(t, last, 80*time.Millisecond)
	}
	require.GreaterOrEqual(t, last, 800*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, b.Wait(ctx))
}

func TestIsOutage(t *testing.T) {
	ok := projection.Result{Status: projection.StatusApplied}
	sqlFail := projection.Result{Status: projection.StatusFailed, Err: &projection.ApplyError{Kind: "sql", Err: errors.New("x")}}
	conn := projection.Result{Status: projection.StatusFailed, Err: &projection.ApplyError{Kind: contract.KindConnection, Err: errors.New("refused")}}
	require.False(t, isOutage([]projection.Result{ok, sqlFail}, nil))
	require.True(t, isOutage([]projection.Result{ok, conn}, nil))
	require.True(t, isOutage(nil, errors.New("dial")))
	require.EqualError(t, firstConnectionError([]projection.Result{sqlFail, conn}), "refused")
}

// TestSegmentsCommitInOrder: a batch whose hand-off is pending holds back
// the commit of every later batch of its partition.
func TestSegmentsCommitInOrder(t *testing.T) {
	p := &partition{done: kgoOffset(-1), committed: -1}
	s1, s2, s3 := &segment{next: kgoOffset(10)}, &segment{next: kgoOffset(20)}, &segment{next: kgoOffset(30)}
	s2.pending.Store(1) // a hand-off in flight
	p.segs = append(p.segs, s1, s2, s3)
	eo, ok := p.committable()
	require.True(t, ok)
	require.EqualValues(t, 10, eo.Offset)
	p.committed = 10
	_, ok = p.committable()
	require.False(t, ok, "nothing new while the hand-off is pending")
	s2.pending.Store(0)
	eo, ok = p.committable()
	require.True(t, ok)
	require.EqualValues(t, 30, eo.Offset)
	require.Empty(t, p.segs)
}

// A failed start is classified once: Temporal refusing the request
// dead-letters at once; throttling and timeouts are outages however long
// they last; other failures while Temporal answers its probe dead-letter
// after maxHealthyStartFailures.
func TestRetrierRefuses(t *testing.T) {
	newRetrier := func(probe func(context.Context) error) *retrier {
		w := &waits{ctx: context.Background(),
			opts: &Options{StartTimeout: time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, TemporalProbe: probe},
			m:    newMetrics(prometheus.NewRegistry())}
		return w.retrier(slog.New(slog.DiscardHandler), w.temporal())
	}
	answers := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("connection refused") }

	require.True(t, newRetrier(answers).refuses("start", serviceerror.NewInvalidArgument("bad search attribute")))

	for name, err := range map[string]error{
		"throttled":        serviceerror.NewResourceExhausted(0, "rate limit"),
		"deadline":         context.DeadlineExceeded,
		"server deadline":  serviceerror.NewDeadlineExceeded("start not answered"),
		"wrapped deadline": fmt.Errorf("update: %w", context.DeadlineExceeded),
	} {
		r := newRetrier(answers)
		for range 3 * maxHealthyStartFailures {
			require.False(t, r.refuses("start", err), name)
		}
		require.Zero(t, r.healthy, name)
		require.False(t, r.outage.IsZero(), "%s is an outage", name)
	}

	r := newRetrier(down)
	for range 3 * maxHealthyStartFailures {
		require.False(t, r.refuses("start", errors.New("unavailable")), "Temporal down: an outage")
	}
	require.Zero(t, r.healthy)

	r = newRetrier(answers)
	for range maxHealthyStartFailures - 1 {
		require.False(t, r.refuses("start", errors.New("workflow input rejected")))
	}
	require.True(t, r.refuses("start", errors.New("workflow input rejected")), "the event is at fault once Temporal answered every time")
	require.True(t, r.outage.IsZero(), "no outage was logged")
}

// A try that waits past slowTry asks the probe while it still waits: a
// silent link is said as soon as the probe fails, once, and a slow try on a
// database that answers is no outage.
func TestRetrierWatchesSlowTries(t *testing.T) {
	defer func(d, e time.Duration) { slowTry, probeEvery = d, e }(slowTry, probeEvery)
	slowTry, probeEvery = 50*time.Millisecond, 20*time.Millisecond
	var probes atomic.Int32
	var up atomic.Bool
	probe := func(context.Context) error {
		probes.Add(1)
		if up.Load() {
			return nil
		}
		return errors.New("dial tcp: i/o timeout")
	}
	newRetrier := func(logs *testenv.LogBuffer) (*retrier, *metrics) {
		m := newMetrics(prometheus.NewRegistry())
		w := &waits{ctx: context.Background(), opts: &Options{Probe: probe, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, m: m}
		return w.retrier(slog.New(slog.NewJSONHandler(logs, nil)), w.database()), m
	}

	logs := &testenv.LogBuffer{}
	r, m := newRetrier(logs)
	w := r.watch(time.Minute, "database unreachable", "events", 3)
	time.Sleep(300 * time.Millisecond) // the try still waits
	require.Contains(t, logs.String(), `"event":"bridge_outage"`, "said while the try waits")
	require.NoError(t, w.ctx.Err(), "the try goes on waiting while the database does not answer")
	require.NoError(t, w.stop(r))
	require.False(t, r.outage.IsZero())
	require.False(t, r.failed("database unreachable", errors.New("timeout: read tcp: connection timed out")))
	w = r.watch(time.Minute, "database unreachable")
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, w.stop(r))
	require.Equal(t, 1, strings.Count(logs.String(), `"event":"bridge_outage"`), "said once")
	require.Equal(t, 1.0, testutil.ToFloat64(m.outages.WithLabelValues("database")), "counted once")

	probes.Store(0)
	up.Store(true)
	logs = &testenv.LogBuffer{}
	r, _ = newRetrier(logs)
	w = r.watch(time.Minute, "database unreachable")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, w.ctx.Err(), "a slow try on a database that answers goes on")
	require.NoError(t, w.stop(r))
	require.EqualValues(t, 1, probes.Load())
	require.True(t, r.outage.IsZero(), "a slow try on a database that answers is no outage")
	require.NotContains(t, logs.String(), "bridge_outage")

	probes.Store(0)
	r, _ = newRetrier(logs)
	require.NoError(t, r.watch(time.Minute, "database unreachable").stop(r))
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, probes.Load(), "a try that returns in time asks nothing")
	require.True(t, r.outage.IsZero())
}

// A try still waiting when its database, silent before, answers new
// connections again waits on a connection that will never answer (a hung
// proxy): the watch ends it. One that outlives its timeout ends too.
func TestRetrierEndsTriesOnSilentConnections(t *testing.T) {
	defer func(d, e time.Duration) { slowTry, probeEvery = d, e }(slowTry, probeEvery)
	slowTry, probeEvery = 20*time.Millisecond, 20*time.Millisecond
	var up atomic.Bool
	probe := func(context.Context) error {
		if up.Load() {
			return nil
		}
		return errors.New("connect: timeout")
	}
	logs := &testenv.LogBuffer{}
	w := &waits{ctx: context.Background(), opts: &Options{Probe: probe}, m: newMetrics(prometheus.NewRegistry())}
	r := w.retrier(slog.New(slog.NewJSONHandler(logs, nil)), w.database())

	wt := r.watch(time.Minute, "database unreachable")
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, wt.ctx.Err(), "nothing answers: the try waits")
	up.Store(true)
	select {
	case <-wt.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the try still waits once the database answers new connections")
	}
	require.ErrorIs(t, wt.stop(r), errSilentConnection)
	require.Contains(t, logs.String(), "silent connection")

	// After that the database answers: a slow try is left alone.
	wt = r.watch(time.Minute, "database unreachable")
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, wt.ctx.Err())
	require.NoError(t, wt.stop(r))

	wt = r.watch(30*time.Millisecond, "database unreachable")
	<-wt.ctx.Done()
	require.ErrorIs(t, wt.stop(r), errTryTimedOut)
}

// A partition with work that has made no progress for the stall time is
// reported (the bridge's /healthz fails); one idle, or one that waits with
// progress (tries returning, backoffs ending), is not.
func TestBridgeReportsAStalledPartition(t *testing.T) {
	stuck := &partition{topic: "events", id: 3, handoffs: &handoffs{waits: &waits{}}}
	moving := &partition{topic: "events", id: 4, handoffs: &handoffs{waits: &waits{}}}
	idle := &partition{topic: "events", id: 5, handoffs: &handoffs{waits: &waits{}}}
	b := &Bridge{parts: map[topicPartition]*partition{{"events", 3}: stuck, {"events", 4}: moving, {"events", 5}: idle}}
	require.NoError(t, b.Stalled(time.Minute))
	require.Zero(t, b.longestStall())

	stuck.busy()
	moving.busy()
	long := time.Now().Add(-2 * time.Minute).UnixNano()
	stuck.lastBeat.Store(long)
	moving.busySince.Store(long)
	moving.beat()
	idle.lastBeat.Store(long) // idle: no work waits, however long ago it last moved
	err := b.Stalled(time.Minute)
	require.ErrorContains(t, err, "partition 3 of events has made no progress for 2m0s while it has work")
	require.InDelta(t, 120, b.longestStall(), 2)

	stuck.idle()
	require.NoError(t, b.Stalled(time.Minute))
}
