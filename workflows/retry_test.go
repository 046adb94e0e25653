package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/workflows"
)

var start = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func testEvent() event.Envelope {
	return event.Envelope{
		EventID: "ev-1", EventType: "ARTIST_FOLLOWED", EntityID: "user-123", ForkID: "production",
		Payload: []byte(`{"artistId":"artist-9"}`),
	}
}

// fakeApplier fails the first failures calls with err, then applies.
type fakeApplier struct {
	mu       sync.Mutex
	failures int
	err      error
	calls    int
}

func (f *fakeApplier) ApplyWith(_ context.Context, name string, ev event.Envelope, _ projection.ApplyOptions) (projection.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.failures {
		return projection.Result{Projection: name, EventID: ev.EventID, IRVersion: 1, Status: projection.StatusFailed,
			Err: &projection.ApplyError{Kind: contract.KindSQL, Err: f.err}}, nil
	}
	return projection.Result{Projection: name, EventID: ev.EventID, IRVersion: 2, Status: projection.StatusApplied}, nil
}

// fakePublisher fails the first failures publishes.
type fakePublisher struct {
	mu       sync.Mutex
	failures int
	calls    int
	records  []dlq.Record
}

func (f *fakePublisher) Publish(_ context.Context, _ []byte, r dlq.Record) (contract.DLQCoordinates, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.failures {
		return contract.DLQCoordinates{}, errors.New("broker unavailable")
	}
	f.records = append(f.records, r)
	return contract.DLQCoordinates{Topic: "causet.projection-dlq.v1", Partition: 0, Offset: int64(len(f.records) - 1)}, nil
}

type harness struct {
	env       *testsuite.TestWorkflowEnvironment
	applier   *fakeApplier
	publisher *fakePublisher
	starts    []time.Duration // activity start offsets from the workflow start
	mu        sync.Mutex
}

func newHarness(t *testing.T, applyFailures, publishFailures int) *harness {
	t.Helper()
	applier := &fakeApplier{failures: applyFailures, err: errors.New(`column "followed_at" of relation "artist_followers" does not exist`)}
	h := newHarnessWith(t, applier, &fakePublisher{failures: publishFailures})
	h.applier = applier
	return h
}

func newHarnessWith(t *testing.T, applier activities.Applier, publisher *fakePublisher) *harness {
	t.Helper()
	a := &activities.Activities{Applier: applier, Publisher: publisher}
	return newHarnessApply(t, a, publisher, a.ApplyProjection)
}

// newHarnessApply registers apply as the ApplyProjection activity.
func newHarnessApply(t *testing.T, a *activities.Activities, publisher *fakePublisher, apply any) *harness {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	h := &harness{env: s.NewTestWorkflowEnvironment(), publisher: publisher}
	h.env.SetStartTime(start)
	h.env.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: contract.RetryWorkflowName})
	h.env.RegisterActivityWithOptions(apply, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	h.env.RegisterActivityWithOptions(a.PublishDeadLetter, activity.RegisterOptions{Name: contract.PublishDeadLetterActivity})
	h.env.RegisterActivityWithOptions(a.SettleHead, activity.RegisterOptions{Name: contract.SettleHeadActivity})
	h.env.RegisterActivityWithOptions(a.JoinIncidentHold, activity.RegisterOptions{Name: contract.JoinIncidentHoldActivity})
	h.env.RegisterActivityWithOptions(a.IncidentHoldEnded, activity.RegisterOptions{Name: contract.IncidentHoldEndedActivity})
	h.env.RegisterActivityWithOptions(a.AwaitIncidentEnded, activity.RegisterOptions{Name: contract.AwaitIncidentEndedActivity})
	h.env.RegisterActivityWithOptions(a.DatabaseAnswers, activity.RegisterOptions{Name: contract.DatabaseAnswersActivity})
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == contract.ApplyProjectionActivity {
			h.mu.Lock()
			h.starts = append(h.starts, h.env.Now().Sub(start))
			h.mu.Unlock()
		}
	})
	return h
}

func input(mode config.Mode, r config.Retry) contract.RetryInput {
	in := contract.RetryInput{
		Event: testEvent(), Projection: "artist_followers", Mode: mode, Retry: r,
		Source:       contract.Source{Topic: "causet.events.v1", Partition: 2, Offset: 41},
		ReplayWindow: time.Hour,
	}
	if mode == config.ModeInline {
		in.FirstAttempt = &contract.Attempt{Number: 1, StartedAt: start, ErrorKind: "sql", Error: "first failure", IRVersion: 1}
	}
	return in
}

func (h *harness) status(t *testing.T) contract.Status {
	t.Helper()
	return queryStatus[contract.Status](t, h.env)
}

// queryStatus is the running workflow's answer to QueryStatus.
func queryStatus[S any](t *testing.T, env *testsuite.TestWorkflowEnvironment) S {
	t.Helper()
	v, err := env.QueryWorkflow(contract.QueryStatus)
	require.NoError(t, err)
	var s S
	require.NoError(t, v.Get(&s))
	return s
}

// run executes the retry workflow with in; it must end without an error,
// and its result is returned.
func (h *harness) run(t *testing.T, in contract.RetryInput) contract.Status {
	t.Helper()
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, in)
	require.NoError(t, h.env.GetWorkflowError())
	var s contract.Status
	require.NoError(t, h.env.GetWorkflowResult(&s))
	return s
}

func secs(fs ...float64) []time.Duration {
	out := make([]time.Duration, len(fs))
	for i, f := range fs {
		out[i] = time.Duration(f * float64(time.Second))
	}
	return out
}

// retryFromEnv reads a schedule the way the worker does, from PROJECTION_WORKER_* values.
func retryFromEnv(t *testing.T, kv map[string]string) config.Retry {
	t.Helper()
	c, err := config.Load(func(k string) (string, bool) { v, ok := kv[k]; return v, ok })
	require.NoError(t, err)
	return c.Retry
}

func TestScheduleOffsets(t *testing.T) {
	fromEnv := retryFromEnv(t, map[string]string{
		"PROJECTION_WORKER_MAX_RETRIES": "4", "PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "4", "PROJECTION_WORKER_RETRY_MAX_MS": "3000",
	})
	tests := []struct {
		name  string
		mode  config.Mode
		retry config.Retry
		want  []time.Duration // activity start offsets from attempt 1
	}{
		{"inline defaults", config.ModeInline, config.DefaultRetry(), secs(1, 3, 7, 15)},
		{"workflow defaults", config.ModeWorkflow, config.DefaultRetry(), secs(0, 1, 3, 7, 15)},
		{"inline custom", config.ModeInline, config.Retry{MaxAttempts: 5, Initial: 1500 * time.Millisecond, Multiplier: 3, Max: 6 * time.Second}, secs(1.5, 6, 12, 18)},
		{"workflow custom", config.ModeWorkflow, config.Retry{MaxAttempts: 5, Initial: 1500 * time.Millisecond, Multiplier: 3, Max: 6 * time.Second}, secs(0, 1.5, 6, 12, 18)},
		{"inline from env", config.ModeInline, fromEnv, secs(1, 4, 7)},
		{"workflow from env", config.ModeWorkflow, fromEnv, secs(0, 1, 4, 7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 100, 0)
			h.env.RegisterDelayedCallback(func() {
				s := h.status(t)
				require.Equal(t, contract.StateDeadLettered, s.State)
				require.Len(t, s.Attempts, tc.retry.MaxAttempts)
				for i, a := range s.Attempts {
					require.Equal(t, i+1, a.Number)
					require.Equal(t, "sql", a.ErrorKind)
				}
				require.NotNil(t, s.DLQ)
				h.env.SignalWorkflow(contract.SignalDiscard, nil)
			}, 30*time.Minute)
			h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(tc.mode, tc.retry))
			require.True(t, h.env.IsWorkflowCompleted())
			require.NoError(t, h.env.GetWorkflowError())
			require.Equal(t, tc.want, h.starts)
			require.Len(t, h.publisher.records, 1)
			rec := h.publisher.records[0]
			require.Equal(t, tc.retry.MaxAttempts, rec.RetryCount)
			require.Len(t, rec.Attempts, tc.retry.MaxAttempts)
			require.Equal(t, "sql", rec.ErrorKind)
		})
	}
}

func TestSucceedsOnAttemptThree(t *testing.T) {
	h := newHarness(t, 1, 0) // attempt 1 failed inline, attempt 2 fails, attempt 3 applies
	s := h.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Empty(t, h.publisher.records)
	require.Nil(t, s.DLQ)
	require.Len(t, s.Attempts, 3)
	require.Equal(t, []int{1, 2, 3}, []int{s.Attempts[0].Number, s.Attempts[1].Number, s.Attempts[2].Number})
	require.Equal(t, "first failure", s.Attempts[0].Error)
	require.Contains(t, s.Attempts[1].Error, "followed_at")
	require.Empty(t, s.Attempts[2].Error)
	require.Equal(t, secs(1, 3), h.starts)
}

func TestAllAttemptsFailDeadLettersOnceWithEveryAttempt(t *testing.T) {
	h := newHarness(t, 100, 0)
	s := h.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateDeadLettered, s.State, "closes dead-lettered when the window expires")
	require.Len(t, h.publisher.records, 1)
	rec := h.publisher.records[0]
	require.Len(t, rec.Attempts, 5)
	require.Equal(t, "artist_followers", rec.ProjectionName)
	require.Equal(t, "production", rec.ForkID)
	require.Equal(t, contract.Source{Topic: "causet.events.v1", Partition: 2, Offset: 41}, rec.Source)
	require.Equal(t, start, rec.FirstFailedAt)
	for i, a := range rec.Attempts {
		require.Equal(t, i+1, a.Number)
		require.False(t, a.StartedAt.IsZero(), "attempt %d has its start time", i+1)
		require.Contains(t, []string{"first failure", `column "followed_at" of relation "artist_followers" does not exist`}, a.Error)
	}
	require.Contains(t, rec.Error, `column "followed_at"`)
	require.NotNil(t, rec.Workflow)
}

func TestDeadLetterPublishRetriesUntilItLands(t *testing.T) {
	h := newHarness(t, 100, 3)
	var closedBeforePublish bool
	h.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, err error) {
		if info.ActivityType.Name == contract.PublishDeadLetterActivity && h.env.IsWorkflowCompleted() {
			closedBeforePublish = true
		}
	})
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, 4, h.publisher.calls, "three failures, then the record lands")
	require.Len(t, h.publisher.records, 1)
	require.False(t, closedBeforePublish)
	var s contract.Status
	require.NoError(t, h.env.GetWorkflowResult(&s))
	require.NotNil(t, s.DLQ)
}

func TestReplayAfterFix(t *testing.T) {
	h := newHarness(t, 5, 0) // attempts 2..5 fail (inline attempt 1 is in the input), then the fix lands
	h.env.RegisterDelayedCallback(func() {
		require.Equal(t, contract.StateDeadLettered, h.status(t).State)
		h.env.SignalWorkflow(contract.SignalReplay, contract.ReplaySignal{Reason: "fixed IR v2"})
	}, time.Minute)
	s := h.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, 1, s.ReplayCount)
	require.Equal(t, "fixed IR v2", s.LastReplayReason)
	require.Len(t, h.publisher.records, 1)
	require.Equal(t, 2, s.IRVersion)
	last := s.Attempts[len(s.Attempts)-1]
	require.Equal(t, 1, last.Run)
	require.Empty(t, last.Error)
}

func TestReplayThatFailsDeadLettersAgain(t *testing.T) {
	h := newHarness(t, 100, 0)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.SignalReplay, nil)
	}, time.Minute)
	h.env.RegisterDelayedCallback(func() {
		s := h.status(t)
		require.Equal(t, contract.StateDeadLettered, s.State)
		require.Equal(t, 1, s.ReplayCount)
		h.env.SignalWorkflow(contract.SignalDiscard, nil)
	}, 10*time.Minute)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, h.publisher.records, 2)
	require.Equal(t, 1, h.publisher.records[1].ReplayCount)
	require.Len(t, h.publisher.records[1].Attempts, 5, "a replay runs the whole schedule")
	var s contract.Status
	require.NoError(t, h.env.GetWorkflowResult(&s))
	require.Equal(t, contract.StateDiscarded, s.State)
}

func TestDiscard(t *testing.T) {
	h := newHarness(t, 100, 0)
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(contract.SignalDiscard, nil) }, time.Minute)
	s := h.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateDiscarded, s.State)
	require.Less(t, h.env.Now().Sub(start), time.Hour, "closed by the signal, not the window")
}

func TestWindowExpiry(t *testing.T) {
	h := newHarness(t, 100, 0)
	in := input(config.ModeInline, config.DefaultRetry())
	in.ReplayWindow = 3 * time.Hour
	s := h.run(t, in)
	require.Equal(t, contract.StateDeadLettered, s.State)
	require.GreaterOrEqual(t, h.env.Now().Sub(start), 3*time.Hour)
}

func TestInvalidEventDeadLettersAfterOneAttempt(t *testing.T) {
	h := newHarness(t, 0, 0)
	in := input(config.ModeWorkflow, config.DefaultRetry())
	in.Event.Payload = []byte(`[1]`)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, in)
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, 0, h.applier.calls)
	require.Len(t, h.starts, 1)
	require.Len(t, h.publisher.records, 1)
	require.Equal(t, "invalid_event", h.publisher.records[0].ErrorKind)
	require.Equal(t, 1, h.publisher.records[0].RetryCount)
}

func TestSingleAttemptInlineGoesStraightToDLQ(t *testing.T) {
	h := newHarness(t, 100, 0)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.Retry{MaxAttempts: 1, Initial: time.Second, Multiplier: 2, Max: time.Second}))
	require.NoError(t, h.env.GetWorkflowError())
	require.Empty(t, h.starts)
	require.Len(t, h.publisher.records, 1)
	require.Equal(t, "first failure", h.publisher.records[0].Error)
}

func TestSearchAttributesPerState(t *testing.T) {
	h := newHarness(t, 4, 0) // dead-letters, then a replay succeeds
	var states []string
	var upserts []map[string]string
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		m := map[string]string{}
		for k, v := range sa.GetUntypedValues() {
			m[k.GetName()] = v.(string)
			if k.GetName() == "CausetRetryState" {
				states = append(states, v.(string))
			}
		}
		upserts = append(upserts, m)
	})
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(contract.SignalReplay, nil) }, time.Minute)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, []string{"retrying", "dead_lettered", "replaying", "succeeded"}, states)
	require.Equal(t, map[string]string{
		"CausetProjection": "artist_followers", "CausetEventType": "ARTIST_FOLLOWED", "CausetEntityId": "user-123",
		"CausetForkId": "production", "CausetRetryState": "retrying", "CausetError": "first failure",
	}, upserts[0], "at start: attempt 1's error")
	require.Equal(t, map[string]string{
		"CausetRetryState": "dead_lettered", "CausetError": `column "followed_at" of relation "artist_followers" does not exist`,
	}, upserts[1], "dead-lettered: the last attempt's error, in the same upsert")
	require.Equal(t, map[string]string{"CausetRetryState": "replaying"}, upserts[2])
}

func TestStatusShowsNextRetryWhileRetrying(t *testing.T) {
	h := newHarness(t, 100, 0)
	// Planned times are compared with the wall clock, so run this workflow
	// in the present.
	now := time.Now().UTC()
	h.env.SetStartTime(now)
	in := input(config.ModeInline, config.DefaultRetry())
	in.FirstAttempt.StartedAt = now
	var mid contract.Status
	h.env.RegisterDelayedCallback(func() { mid = h.status(t) }, 2*time.Second)
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(contract.SignalDiscard, nil) }, time.Minute)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, in)
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, contract.StateRetrying, mid.State)
	require.Equal(t, []time.Time{now.Add(time.Second), now.Add(3 * time.Second), now.Add(7 * time.Second), now.Add(15 * time.Second)}, mid.Schedule)
	require.NotNil(t, mid.NextRetryAt)
	require.True(t, mid.NextRetryAt.After(now), "the next planned attempt is still ahead")
	var end contract.Status
	require.NoError(t, h.env.GetWorkflowResult(&end))
	require.Nil(t, end.NextRetryAt)
	require.Empty(t, end.Schedule)
}

// errHang stands for an attempt that never returns: hangingApplier panics
// with it and newTimeoutHarness ends the attempt as the server would.
var errHang = errors.New("attempt hangs")

// hangingApplier is a fakeApplier that hangs on the activity attempts in hang.
type hangingApplier struct {
	fakeApplier
	hang map[int32]bool
	// always hangs every attempt.
	always bool
	// unstarted are attempts lost before the activity ran (before it
	// recorded itself in its heartbeat).
	unstarted map[int32]bool
}

func (f *hangingApplier) ApplyWith(ctx context.Context, name string, ev event.Envelope, opts projection.ApplyOptions) (projection.Result, error) {
	if f.always || f.hang[activity.GetInfo(ctx).Attempt] {
		panic(errHang)
	}
	return f.fakeApplier.ApplyWith(ctx, name, ev, opts)
}

// lastHeartbeat keeps each activity's last heartbeat details, as the server
// does: a timeout carries them.
type lastHeartbeat struct {
	mu   sync.Mutex
	last map[string][]contract.Attempt // by activity ID
}

func (l *lastHeartbeat) get(activityID string) []contract.Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.last[activityID])
}

// record keeps the attempts a heartbeat carries (testenv.OnHeartbeat calls it).
func (l *lastHeartbeat) record(ctx context.Context, details []any) {
	if len(details) == 1 {
		if at, ok := details[0].([]contract.Attempt); ok {
			l.mu.Lock()
			l.last[activity.GetInfo(ctx).ActivityID] = slices.Clone(at)
			l.mu.Unlock()
		}
	}
}

// newTimeoutHarness runs the real ApplyProjection, except that an attempt
// the applier hangs on ends as the server ends it: with a StartToClose
// timeout that carries the activity's last heartbeat details, caused by the
// previous attempt's failure.
func newTimeoutHarness(t *testing.T, failures int, hang ...int32) *harness {
	t.Helper()
	h, _ := newTimeoutHarnessOf(t, enumspb.TIMEOUT_TYPE_START_TO_CLOSE, failures, hang...)
	return h
}

// newTimeoutHarnessOf is newTimeoutHarness with the server's timeout of a
// hung attempt: START_TO_CLOSE (it ran too long) or HEARTBEAT (its worker
// stopped answering). hang with no attempts hangs every one. It returns the
// applier too, and counts the activity's executions in its calls.
func newTimeoutHarnessOf(t *testing.T, timeout enumspb.TimeoutType, failures int, hang ...int32) (*harness, *hangingApplier) {
	t.Helper()
	applier := &hangingApplier{always: len(hang) == 0,
		fakeApplier: fakeApplier{failures: failures, err: errors.New(`column "followed_at" of relation "artist_followers" does not exist`)},
		hang:        map[int32]bool{},
	}
	for _, n := range hang {
		applier.hang[n] = true
	}
	publisher := &fakePublisher{}
	a := &activities.Activities{Applier: applier, Publisher: publisher}
	beats := &lastHeartbeat{last: map[string][]contract.Attempt{}}
	var mu sync.Mutex
	lastErr := map[string]error{} // by activity ID
	apply := func(ctx context.Context, in contract.ApplyInput) (out contract.ApplyOutput, err error) {
		id := activity.GetInfo(ctx).ActivityID
		defer func() {
			if p := recover(); p != nil {
				if p != errHang {
					panic(p)
				}
				var details []any
				if at := beats.get(id); at != nil {
					details = append(details, at)
				}
				mu.Lock()
				err = temporal.NewTimeoutError(timeout, lastErr[id], details...)
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				lastErr[id] = err
				mu.Unlock()
			}
		}()
		if applier.unstarted[activity.GetInfo(ctx).Attempt] {
			panic(errHang)
		}
		return a.ApplyProjection(ctx, in)
	}
	h := newHarnessApply(t, a, publisher, apply)
	h.applier = &applier.fakeApplier
	h.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{testenv.OnHeartbeat(beats.record)}})
	return h, applier
}

// An attempt that times out returns no error details; the run still keeps
// every attempt, the timed-out one included, in a contract errorKind.
func TestTimedOutAttemptKeepsEveryAttempt(t *testing.T) {
	const timedOut = "attempt timed out after 1m0s"
	sqlErr := `column "followed_at" of relation "artist_followers" does not exist`
	for _, tc := range []struct {
		name string
		mode config.Mode
		hang []int32 // activity attempts that time out
		want []string
	}{
		{"last attempt, workflow mode", config.ModeWorkflow, []int32{5}, []string{sqlErr, sqlErr, sqlErr, sqlErr, timedOut}},
		{"last attempt, inline mode", config.ModeInline, []int32{4}, []string{"first failure", sqlErr, sqlErr, sqlErr, timedOut}},
		{"a middle attempt", config.ModeWorkflow, []int32{3}, []string{sqlErr, sqlErr, timedOut, sqlErr, sqlErr}},
		{"every attempt", config.ModeWorkflow, []int32{1, 2, 3, 4, 5}, []string{timedOut, timedOut, timedOut, timedOut, timedOut}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTimeoutHarness(t, 100, tc.hang...)
			h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(tc.mode, config.DefaultRetry()))
			require.NoError(t, h.env.GetWorkflowError())
			require.Len(t, h.publisher.records, 1)
			rec := h.publisher.records[0]
			require.Equal(t, 5, rec.RetryCount)
			require.Equal(t, "sql", rec.ErrorKind)
			require.Equal(t, tc.want[4], rec.Error)
			require.Len(t, rec.Attempts, 5)
			for i, a := range rec.Attempts {
				require.Equal(t, i+1, a.Number)
				require.Equal(t, "sql", a.ErrorKind, "attempt %d", i+1)
				require.Equal(t, tc.want[i], a.Error, "attempt %d", i+1)
				require.False(t, a.StartedAt.IsZero(), "attempt %d has its start time", i+1)
			}
			require.Equal(t, rec.Attempts[0].StartedAt, rec.FirstFailedAt)
		})
	}
}

// A timed-out attempt before the one that applies the event stays in the
// run's attempts.
func TestTimedOutAttemptBeforeSuccessIsKept(t *testing.T) {
	h := newTimeoutHarness(t, 1, 2) // attempt 1 fails, 2 times out, 3 applies
	s := h.run(t, input(config.ModeWorkflow, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Empty(t, h.publisher.records)
	require.Len(t, s.Attempts, 3)
	require.Equal(t, []int{1, 2, 3}, []int{s.Attempts[0].Number, s.Attempts[1].Number, s.Attempts[2].Number})
	require.Equal(t, "sql", s.Attempts[1].ErrorKind)
	require.Equal(t, "attempt timed out after 1m0s", s.Attempts[1].Error)
	require.False(t, s.Attempts[1].StartedAt.IsZero())
	require.Empty(t, s.Attempts[2].Error)
}

// The schedule's last attempt, lost with its worker (the server times it
// out on its heartbeat: the worker was killed, stopped or cut off, or
// Temporal was down), is not the event's failure: it counts as none and is
// tried again, and the event applies. An earlier attempt lost so counts as
// timed out, and the server goes on with the next.
func TestLastAttemptLostWithItsWorkerIsTriedAgain(t *testing.T) {
	h, applier := newTimeoutHarnessOf(t, enumspb.TIMEOUT_TYPE_HEARTBEAT, 3, 2, 5) // 1, 3, 4 fail; 2 and 5 are lost
	var ids []string
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == contract.ApplyProjectionActivity && !slices.Contains(ids, info.ActivityID) {
			ids = append(ids, info.ActivityID)
		}
	})
	s := h.run(t, input(config.ModeWorkflow, config.DefaultRetry()))
	requireAppliedByTheFifthAttempt(t, h, s)
	require.Equal(t, 4, applier.calls, "attempts 1, 3 and 4 failed, 5 tried again applied")
	require.Equal(t, "attempt timed out after 1m0s", s.Attempts[1].Error, "a middle attempt lost counts")
	// The attempt tried again is an activity of an ID of its own, which a
	// worker of the previous release replaying the run cannot take for one
	// of its own steps (workflows.lostRetryActivityID).
	require.Len(t, ids, 2, "the schedule's activity, then the lost attempt's: %v", ids)
	require.Equal(t, "apply-lost-attempt-run-0-1", ids[1])
	require.NotEqual(t, ids[0], ids[1])
}

// requireAppliedByTheFifthAttempt: the run succeeded at its 5th attempt,
// every attempt numbered in order, nothing dead-lettered.
func requireAppliedByTheFifthAttempt(t *testing.T, h *harness, s contract.Status) {
	t.Helper()
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Empty(t, h.publisher.records, "nothing dead-lettered")
	require.Len(t, s.Attempts, 5)
	for i, a := range s.Attempts {
		require.Equal(t, i+1, a.Number)
	}
	require.Empty(t, s.Attempts[4].Error, "the last attempt, tried again, applied")
}

// A last attempt lost before it ran (its worker went as it took the task,
// before the attempt recorded itself) is tried again too.
func TestLastAttemptLostBeforeItRanIsTriedAgain(t *testing.T) {
	h, applier := newTimeoutHarnessOf(t, enumspb.TIMEOUT_TYPE_HEARTBEAT, 3, 99)
	applier.unstarted = map[int32]bool{4: true} // inline mode: the activity's 4th attempt is the 5th
	s := h.run(t, input(config.ModeInline, config.DefaultRetry()))
	requireAppliedByTheFifthAttempt(t, h, s)
	require.Equal(t, 4, applier.calls, "attempts 2-4 failed, 5 tried again applied")
}

// An event whose every attempt is lost (one that kills each worker it runs
// on) still ends: the last attempt is tried again at most
// contract.MaxLostAttempts times, then counts as timed out and the event is
// dead-lettered.
func TestAttemptsLostEveryTimeStillDeadLetter(t *testing.T) {
	h, applier := newTimeoutHarnessOf(t, enumspb.TIMEOUT_TYPE_HEARTBEAT, 0)
	var executions atomic.Int32
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == contract.ApplyProjectionActivity {
			executions.Add(1)
		}
	})
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeWorkflow, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	require.Len(t, h.publisher.records, 1)
	rec := h.publisher.records[0]
	require.Equal(t, "attempt timed out after 1m0s", rec.Error)
	require.Len(t, rec.Attempts, 5)
	require.Equal(t, 5, rec.Attempts[4].Number)
	require.Zero(t, applier.calls)
	require.EqualValues(t, 5+contract.MaxLostAttempts, executions.Load(), "five attempts, the last tried again %d times", contract.MaxLostAttempts)
}

// Under CAUSET_INCIDENT_POLICY=hold a run whose schedule runs out with the
// failure a holding incident has joins the hold: state held, no dead
// letter; once the incident is resolved the run goes through its schedule
// again and applies. If the incident dead-letters everything, so does the
// run.
func TestRunJoinsAHoldingIncident(t *testing.T) {
	const incidentID = "projection-incident:artist_followers:00000000000000aa"
	for _, end := range []contract.IncidentState{contract.IncidentResolved, contract.IncidentDeadLettered} {
		t.Run(string(end), func(t *testing.T) {
			h := newHarness(t, 5, 0) // the whole first schedule fails, the next attempt applies
			var joined contract.JoinHoldInput
			h.env.OnActivity(contract.JoinIncidentHoldActivity, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in contract.JoinHoldInput) (string, error) {
					joined = in
					return incidentID, nil
				})
			held := holdUntil(h, incidentID, start.Add(time.Hour), end)
			h.env.RegisterDelayedCallback(func() {
				s := h.status(t)
				require.Equal(t, contract.StateHeld, s.State, "held, not dead-lettered")
				require.Equal(t, incidentID, s.HeldBy)
				require.Nil(t, s.DLQ)
			}, 30*time.Minute)
			h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeWorkflow, config.DefaultRetry()))
			require.True(t, h.env.IsWorkflowCompleted())
			require.NoError(t, h.env.GetWorkflowError())
			require.Equal(t, contract.JoinHoldInput{Projection: "artist_followers", ErrorKind: "sql",
				Error: `column "followed_at" of relation "artist_followers" does not exist`}, joined)
			// Asked on the backoff, 5 s doubling to 2 min, none holding a
			// worker slot between: an hour's hold is about 35 asks on a
			// server; the test environment ends an activity after 10
			// attempts, and the run asks again, so about 57 here.
			require.GreaterOrEqual(t, len(*held), 30)
			require.LessOrEqual(t, len(*held), 70)
			gaps := *held
			for i := 1; i < len(gaps); i++ {
				require.LessOrEqual(t, gaps[i].Sub(gaps[i-1]), 2*time.Minute+time.Second, "ask %d", i)
			}
			var st contract.Status
			require.NoError(t, h.env.GetWorkflowResult(&st))
			if end == contract.IncidentResolved {
				require.Equal(t, contract.StateSucceeded, st.State)
				require.Empty(t, h.publisher.records, "a run held by an incident is never dead-lettered")
				require.Equal(t, 1, st.ReplayCount, "the second schedule, after the incident")
				return
			}
			require.Equal(t, contract.StateDeadLettered, st.State, "dead-lettered with the incident (then its window ended)")
			require.Len(t, h.publisher.records, 1)
		})
	}
}

// holdUntil answers the held run's asks: the incident holds until endAt,
// then went to end. It returns the times of the asks.
func holdUntil(h *harness, incidentID string, endAt time.Time, end contract.IncidentState) *[]time.Time {
	var asks []time.Time
	h.env.OnActivity(contract.IncidentHoldEndedActivity, mock.Anything, incidentID).Return(
		func(ctx context.Context, _ string) (contract.IncidentState, error) {
			now := h.env.Now().UTC()
			asks = append(asks, now)
			if now.Before(endAt) {
				return "", temporal.NewApplicationError("incident still holds", contract.IncidentStillHoldsType)
			}
			return end, nil
		})
	return &asks
}

// A held run woken by SignalHoldEnded asks at once: it applies when woken,
// not at its next backoff (up to two minutes later). A wake sent while the
// incident still holds (another incident of the projection ended) only
// costs an ask.
func TestHeldRunAsksAtOnceWhenWoken(t *testing.T) {
	const incidentID = "projection-incident:artist_followers:00000000000000aa"
	h := newHarness(t, 5, 0)
	h.env.OnActivity(contract.JoinIncidentHoldActivity, mock.Anything, mock.Anything).Return(incidentID, nil)
	endAt := start.Add(3 * time.Hour)
	asks := holdUntil(h, incidentID, endAt, contract.IncidentReleasing)
	woke := endAt.Add(7 * time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.SignalHoldEnded, "projection-incident:artist_followers:00000000000000bb")
	}, time.Hour+7*time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(contract.SignalHoldEnded, incidentID)
	}, woke.Sub(start))
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeWorkflow, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	var st contract.Status
	require.NoError(t, h.env.GetWorkflowResult(&st))
	require.Equal(t, contract.StateSucceeded, st.State)
	last := (*asks)[len(*asks)-1]
	require.Equal(t, woke, last, "the ask that found the hold ended came with the wake")
	require.Contains(t, *asks, start.Add(time.Hour+7*time.Second), "the other incident's wake asked too")
	// 3 h on a 2-min backoff: ~95 asks on a server, ~175 in the test
	// environment (10 attempts an activity); the two wakes add two.
	require.Less(t, len(*asks), 200)
}

// metadata is the run's user metadata as the Temporal UI reads it.
func (h *harness) currentDetails(t *testing.T) string {
	t.Helper()
	v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	return md.GetCurrentDetails()
}

// The run's page says where it stands in the project's attempt numbers:
// retrying with the next attempts' times, then dead-lettered with the DLQ
// coordinates and the replay command, then succeeded on its attempt.
func TestCurrentDetailsTellWhereTheRunStands(t *testing.T) {
	h := newHarness(t, 100, 0)
	in := input(config.ModeInline, config.DefaultRetry())
	var retrying, dead string
	h.env.RegisterDelayedCallback(func() { retrying = h.currentDetails(t) }, 2*time.Second)
	h.env.RegisterDelayedCallback(func() {
		dead = h.currentDetails(t)
		h.env.SignalWorkflow(contract.SignalDiscard, nil)
	}, 30*time.Second)
	h.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: in.WorkflowID()})
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, in)
	require.NoError(t, h.env.GetWorkflowError())

	require.Contains(t, retrying, "**Retrying.**")
	require.Contains(t, retrying, "Attempt 1 of 5 failed: first failure")
	require.Contains(t, retrying, "Attempts 2–5 at 12:00:01, 12:00:03, 12:00:07, 12:00:15 UTC, as the ApplyProjection activity (its attempt k is attempt k+1 here)")
	require.Contains(t, dead, "**Dead-lettered** after attempt 5 of 5: "+`column "followed_at" of relation "artist_followers" does not exist`)
	require.Contains(t, dead, "DLQ record: ")
	require.Contains(t, dead, contract.ReplayCommand(in.WorkflowID()))

	h = newHarness(t, 1, 0)
	h.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.DefaultRetry()))
	require.NoError(t, h.env.GetWorkflowError())
	require.Equal(t, "**Succeeded** on attempt 3 of 5.", h.currentDetails(t))
}

// outageDatabase is a database that fails the first apply with a SQL error,
// then goes down (every apply a connection error, every probe refused) until
// its answers-th probe, and then applies.
type outageDatabase struct {
	mu             sync.Mutex
	applies        int
	probes, answer int
	down           bool
}

func (d *outageDatabase) ApplyWith(_ context.Context, name string, ev event.Envelope, _ projection.ApplyOptions) (projection.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	switch {
	case d.applies == 1:
		return projection.Result{Projection: name, EventID: ev.EventID, IRVersion: 1, Status: projection.StatusFailed,
			Err: &projection.ApplyError{Kind: contract.KindSQL, Err: errors.New("deadlock detected")}}, nil
	case d.applies == 2:
		d.down = true
	}
	if d.down {
		return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusFailed},
			&projection.ApplyError{Kind: contract.KindConnection, Err: errors.New("dial tcp 10.0.0.5:5432: connect: connection refused")}
	}
	return projection.Result{Projection: name, EventID: ev.EventID, IRVersion: 1, Status: projection.StatusApplied}, nil
}

func (d *outageDatabase) probe(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probes++
	if d.probes >= d.answer {
		d.down = false
	}
	if d.down {
		return errors.New("connect: connection refused")
	}
	return nil
}

// An attempt that cannot reach a database that does not answer a probe
// either is an outage: it counts as no attempt. The run waits (in
// DatabaseAnswers, asked again on the server's backoff) until the database
// answers, then tries the same attempt again: with 3 attempts in all, the
// event still applies at attempt 3 after attempt 2 failed, however long the
// outage, and nothing is dead-lettered. A connection failure while the
// database answers a probe counts, as before.
func TestDatabaseOutageCountsNoAttempt(t *testing.T) {
	db := &outageDatabase{answer: 6}
	pub := &fakePublisher{}
	a := &activities.Activities{Applier: db, Publisher: pub, ProbeDatabase: db.probe}
	h := newHarnessApply(t, a, pub, a.ApplyProjection)
	var asks int
	h.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, err error) {
		if info.ActivityType.Name == contract.DatabaseAnswersActivity {
			asks++
		}
	})
	r := config.Retry{MaxAttempts: 3, Initial: time.Second, Multiplier: 2, Max: time.Minute}
	s := h.run(t, input(config.ModeInline, r))
	require.Equal(t, contract.StateSucceeded, s.State, "%+v", s.Attempts)
	require.Empty(t, pub.records, "nothing dead-lettered through the outage")
	require.Equal(t, []int{1, 2, 3}, []int{s.Attempts[0].Number, s.Attempts[1].Number, s.Attempts[2].Number})
	require.Len(t, s.Attempts, 3)
	require.Equal(t, "deadlock detected", s.Attempts[1].Error)
	require.Empty(t, s.Attempts[2].Error)
	require.Equal(t, 6, db.probes, "the attempt's own probe, then DatabaseAnswers until the database answered")
	require.Equal(t, 1, asks, "one DatabaseAnswers, asked again by the server while the database was down")
	require.Len(t, h.starts, 3, "attempt 2, attempt 3 meeting the outage, attempt 3 again")
	require.Greater(t, h.starts[2]-h.starts[1], 2*time.Second, "attempt 3 ran again only once the database answered")

	// A connection failure while the database answers: an attempt like any.
	db = &outageDatabase{answer: 1}
	pub = &fakePublisher{}
	a = &activities.Activities{Applier: db, Publisher: pub, ProbeDatabase: func(context.Context) error { return nil }}
	h = newHarnessApply(t, a, pub, a.ApplyProjection)
	s = h.run(t, input(config.ModeInline, r))
	require.Equal(t, contract.StateDeadLettered, s.State)
	require.Len(t, pub.records, 1)
	require.Equal(t, string(contract.KindConnection), pub.records[0].ErrorKind)
}
