package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/workflows"
)

const (
	incProjection  = "artist_followers"
	incFingerprint = "sql:42703:0f3a"
	incError       = `column "followed_at" of relation "artist_followers" does not exist`
)

var incID = contract.IncidentWorkflowID(incProjection, incFingerprint)

// incCall is one incident activity call: its name, when it started (from
// the workflow start) and its argument.
type incCall struct {
	Name string
	At   time.Duration
	Arg  any
}

type incHarness struct {
	env *testsuite.TestWorkflowEnvironment
	// probe answers the n-th ProbeIncident call (activity retries count).
	probe func(n int) (contract.ProbeResult, error)
	// onProbe, when set, runs inside the n-th ProbeIncident call.
	onProbe func(n int)
	// onAwait, when set, runs inside AwaitIncidentReleased.
	onAwait func()
	// onSetState, when set, runs inside SetIncidentState.
	onSetState func(contract.SetIncidentStateInput)
	// restart answers IncidentRestart (nil: the row has ended).
	restart *contract.IncidentInput

	mu     sync.Mutex
	calls  []incCall
	probes int
	states []string // CausetIncidentState values upserted, in order
}

func newIncHarness(t *testing.T, probe func(n int) (contract.ProbeResult, error)) *incHarness {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	h := &incHarness{env: s.NewTestWorkflowEnvironment(), probe: probe}
	h.env.SetStartTime(start)
	h.env.RegisterWorkflowWithOptions(workflows.ProjectionIncidentWorkflow, workflow.RegisterOptions{Name: contract.IncidentWorkflowName})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in contract.IncidentInput) (contract.ProbeResult, error) {
		h.mu.Lock()
		h.probes++
		n := h.probes
		h.calls = append(h.calls, incCall{contract.ProbeIncidentActivity, h.env.Now().Sub(start), in.Sample.EventID})
		h.mu.Unlock()
		if h.onProbe != nil {
			h.onProbe(n)
		}
		return h.probe(n)
	}, activity.RegisterOptions{Name: contract.ProbeIncidentActivity})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in contract.SetIncidentStateInput) error {
		h.record(contract.SetIncidentStateActivity, in)
		if h.onSetState != nil {
			h.onSetState(in)
		}
		return nil
	}, activity.RegisterOptions{Name: contract.SetIncidentStateActivity})
	h.env.RegisterActivityWithOptions(func(_ context.Context, id string) (*contract.IncidentInput, error) {
		h.record(contract.IncidentRestartActivity, id)
		return h.restart, nil
	}, activity.RegisterOptions{Name: contract.IncidentRestartActivity})
	h.env.RegisterActivityWithOptions(func(_ context.Context, id string) error {
		h.record(contract.AwaitIncidentReleasedActivity, id)
		if h.onAwait != nil {
			h.onAwait()
		}
		return nil
	}, activity.RegisterOptions{Name: contract.AwaitIncidentReleasedActivity})
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		v, ok := sa.GetKeyword(contract.AttrIncidentState)
		require.True(t, ok, "every upsert carries the state")
		p, ok := sa.GetKeyword(contract.AttrProjection)
		require.True(t, ok, "every upsert carries the projection")
		require.Equal(t, incProjection, p)
		h.mu.Lock()
		h.states = append(h.states, v)
		h.mu.Unlock()
	})
	return h
}

func (h *incHarness) record(name string, arg any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, incCall{name, h.env.Now().Sub(start), arg})
}

// probeAt returns the start offsets of the ProbeIncident calls.
func (h *incHarness) probeAt() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for _, c := range h.calls {
		if c.Name == contract.ProbeIncidentActivity {
			out = append(out, c.At)
		}
	}
	return out
}

// finishCalls returns the calls after the last probe, without their times.
func (h *incHarness) finishCalls() []incCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []incCall
	for _, c := range h.calls {
		if c.Name == contract.ProbeIncidentActivity {
			out = nil
			continue
		}
		out = append(out, incCall{Name: c.Name, Arg: c.Arg})
	}
	return out
}

func (h *incHarness) status(t *testing.T) contract.IncidentStatus {
	t.Helper()
	return queryStatus[contract.IncidentStatus](t, h.env)
}

// at runs f at offset d of workflow time.
func (h *incHarness) at(d time.Duration, f func()) {
	h.env.RegisterDelayedCallback(f, d)
}

func (h *incHarness) run(t *testing.T, in contract.IncidentInput) contract.IncidentStatus {
	t.Helper()
	h.env.ExecuteWorkflow(contract.IncidentWorkflowName, in)
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var st contract.IncidentStatus
	require.NoError(t, h.env.GetWorkflowResult(&st))
	return st
}

func incInput(policy config.IncidentPolicy, r config.Retry) contract.IncidentInput {
	return contract.IncidentInput{
		Projection: incProjection, Fingerprint: incFingerprint, Policy: policy,
		ErrorKind: "sql", SQLState: "42703", Error: incError, Pattern: `column "?" of relation "?" does not exist`,
		Sample: testEvent(), Retry: r,
	}
}

// failing answers OK:false for the first n probes, then OK.
func failing(n int) func(int) (contract.ProbeResult, error) {
	return func(i int) (contract.ProbeResult, error) {
		if i <= n {
			// As ProbeIncident answers a sample that still fails this way.
			still := contract.ProbeResult{Error: incError, IRVersion: 1}
			return still, temporal.NewNonRetryableApplicationError("probe: the sample still fails: "+incError, contract.ProbeFailedType, nil, still)
		}
		return contract.ProbeResult{OK: true, IRVersion: 2}, nil
	}
}

func setState(s contract.IncidentState, from ...contract.IncidentState) incCall {
	return incCall{Name: contract.SetIncidentStateActivity, Arg: contract.SetIncidentStateInput{ID: incID, State: s, From: from}}
}

// The moves of a hold's end: compare-and-set from the state the run left.
var (
	releaseCalls = []incCall{setState(contract.IncidentReleasing, contract.IncidentHolding), awaitReleased,
		setState(contract.IncidentResolved, contract.IncidentReleasing)}
	deadLetterAllCalls = []incCall{setState(contract.IncidentDeadLettering, contract.IncidentHolding), awaitReleased,
		setState(contract.IncidentDeadLettered, contract.IncidentDeadLettering)}
)

var awaitReleased = incCall{Name: contract.AwaitIncidentReleasedActivity, Arg: incID}

func at(d time.Duration) *time.Time {
	t := start.Add(d)
	return &t
}

func TestIncidentHoldProbesOnBackoffThenReleases(t *testing.T) {
	h := newIncHarness(t, failing(2))
	r := config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: 3 * time.Second}
	var before, afterOne, afterTwo contract.IncidentStatus
	h.at(500*time.Millisecond, func() { before = h.status(t) })
	h.at(2*time.Second, func() { afterOne = h.status(t) })
	h.at(4*time.Second, func() { afterTwo = h.status(t) })
	st := h.run(t, incInput(config.IncidentHold, r))

	require.Equal(t, contract.IncidentHolding, before.State)
	require.Equal(t, at(time.Second), before.NextProbeAt)
	require.Zero(t, before.Probes)
	require.Equal(t, start, before.FirstSeen)

	require.Equal(t, 1, afterOne.Probes)
	require.Equal(t, at(time.Second), afterOne.LastProbeAt)
	require.Equal(t, incError, afterOne.LastProbeError)
	require.Equal(t, at(3*time.Second), afterOne.NextProbeAt, "2s after the first probe")

	require.Equal(t, 2, afterTwo.Probes)
	require.Equal(t, at(6*time.Second), afterTwo.NextProbeAt, "capped at Max, 3s")

	// 1s, then 2s, then 3s (4s capped).
	require.Equal(t, secs(1, 3, 6), h.probeAt())
	require.Equal(t, releaseCalls, h.finishCalls())

	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "probe", st.ResolvedBy)
	require.Equal(t, at(6*time.Second), st.ResolvedAt)
	require.NotNil(t, st.CaughtUpAt)
	require.Equal(t, 3, st.Probes)
	require.Empty(t, st.LastProbeError)
	require.Nil(t, st.NextProbeAt)
	require.Equal(t, config.IncidentHold, st.Policy)
	require.Equal(t, "42703", st.SQLState)
	require.Equal(t, []string{"holding", "releasing", "resolved"}, h.states)
}

func TestIncidentDeadLetterPolicyResolvesWithoutRelease(t *testing.T) {
	h := newIncHarness(t, failing(0))
	st := h.run(t, incInput(config.IncidentDeadLetter, config.DefaultRetry()))
	require.Equal(t, secs(1), h.probeAt())
	require.Equal(t, []incCall{setState(contract.IncidentResolved)}, h.finishCalls(), "nothing is held: no release to wait for")
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "probe", st.ResolvedBy)
	require.Equal(t, 1, st.Probes)
	require.Nil(t, st.CaughtUpAt)
	require.Equal(t, []string{"open", "resolved"}, h.states)
}

func TestIncidentFailuresAccumulate(t *testing.T) {
	h := newIncHarness(t, failing(100))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: time.Minute}
	ids := func(from, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("ev-%d", from+i)
		}
		return out
	}
	h.at(time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 6, Held: 6, EventIDs: ids(0, 6), At: start.Add(time.Second)})
	})
	h.at(2*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 7, Held: 5, EventIDs: ids(6, 7), At: start.Add(2 * time.Second)})
	})
	// A bridge that reports late does not move LastSeen back.
	h.at(3*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 2, Held: 2, EventIDs: ids(13, 2), At: start.Add(500 * time.Millisecond)})
	})
	var mid contract.IncidentStatus
	h.at(4*time.Second, func() { mid = h.status(t) })
	h.at(5*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalResolve, contract.OperatorSignal{Identity: "alice@ops"})
	})
	st := h.run(t, incInput(config.IncidentHold, r))

	require.Equal(t, contract.IncidentHolding, mid.State)
	require.Equal(t, 15, mid.EventsAffected)
	require.Equal(t, 13, mid.EventsHeld)
	require.Equal(t, ids(0, contract.MaxIncidentSamples), mid.SampleEventIDs)
	require.Equal(t, start.Add(2*time.Second), mid.LastSeen)
	require.Equal(t, start, mid.FirstSeen)
	require.Zero(t, mid.Probes, "a failures signal is no reason to probe")
	require.Equal(t, at(time.Minute), mid.NextProbeAt, "the backoff timer is kept across signals")

	require.Empty(t, h.probeAt())
	require.Equal(t, 15, st.EventsAffected)
	require.Equal(t, 13, st.EventsHeld)
	require.Len(t, st.SampleEventIDs, contract.MaxIncidentSamples)
}

// Bridges that report while the incident closes (during its last probe or
// the release) are counted in its result.
func TestIncidentFailuresWhileClosingCount(t *testing.T) {
	h := newIncHarness(t, failing(0))
	failures := func(id string, d time.Duration) contract.IncidentFailures {
		return contract.IncidentFailures{Events: 1, Held: 1, EventIDs: []string{id}, At: start.Add(d)}
	}
	h.onProbe = func(int) { h.env.SignalWorkflow(contract.SignalIncidentFailures, failures("ev-8", time.Second)) }
	h.onAwait = func() { h.env.SignalWorkflow(contract.SignalIncidentFailures, failures("ev-9", 2*time.Second)) }
	st := h.run(t, incInput(config.IncidentHold, config.DefaultRetry()))
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, 2, st.EventsAffected)
	require.Equal(t, 2, st.EventsHeld)
	require.Equal(t, []string{"ev-8", "ev-9"}, st.SampleEventIDs)
	require.Equal(t, start.Add(2*time.Second), st.LastSeen)
}

func TestIncidentDeployedProbesAtOnce(t *testing.T) {
	h := newIncHarness(t, failing(1))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	h.at(10*time.Second, func() { h.env.SignalWorkflow(contract.SignalDeployed, nil) })
	var mid contract.IncidentStatus
	h.at(90*time.Second, func() { mid = h.status(t) })
	st := h.run(t, incInput(config.IncidentDeadLetter, r))

	// The deploy probes at 10s, well before the 1m timer; the next probe
	// is 2m after it, and none runs at 1m.
	require.Equal(t, []time.Duration{10 * time.Second, 2*time.Minute + 10*time.Second}, h.probeAt())
	require.Equal(t, 1, mid.Probes)
	require.Equal(t, at(10*time.Second), mid.LastProbeAt)
	require.Equal(t, at(2*time.Minute+10*time.Second), mid.NextProbeAt)
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, 2, st.Probes)
	require.Equal(t, at(2*time.Minute+10*time.Second), st.ResolvedAt)
}

func TestIncidentResolveSignal(t *testing.T) {
	tests := []struct {
		name     string
		policy   config.IncidentPolicy
		identity string
		wantBy   string
		want     []incCall
		states   []string
	}{
		{"hold", config.IncidentHold, "alice@ops", "alice@ops",
			releaseCalls,
			[]string{"holding", "releasing", "resolved"}},
		{"hold without identity", config.IncidentHold, "", "operator",
			releaseCalls,
			[]string{"holding", "releasing", "resolved"}},
		{"dead-letter", config.IncidentDeadLetter, "alice@ops", "alice@ops",
			[]incCall{setState(contract.IncidentResolved)},
			[]string{"open", "resolved"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newIncHarness(t, failing(100))
			r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
			h.at(90*time.Second, func() {
				h.env.SignalWorkflow(contract.SignalResolve, contract.OperatorSignal{Identity: tc.identity, Reason: "IR v3 adds followed_at"})
			})
			st := h.run(t, incInput(tc.policy, r))
			require.Equal(t, secs(60), h.probeAt(), "no probe after the decision")
			require.Equal(t, tc.want, h.finishCalls())
			require.Equal(t, contract.IncidentResolved, st.State)
			require.Equal(t, tc.wantBy, st.ResolvedBy)
			require.Equal(t, "IR v3 adds followed_at", st.Reason)
			require.Equal(t, at(90*time.Second), st.ResolvedAt)
			require.Equal(t, 1, st.Probes)
			require.Equal(t, incError, st.LastProbeError, "the last probe did fail")
			require.Nil(t, st.NextProbeAt)
			require.Equal(t, tc.states, h.states)
		})
	}
}

func TestIncidentDeadLetterAllUnderHold(t *testing.T) {
	h := newIncHarness(t, failing(100))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	h.at(30*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalDeadLetterAll, contract.OperatorSignal{Identity: "bob@ops", Reason: "events are obsolete"})
	})
	st := h.run(t, incInput(config.IncidentHold, r))
	require.Empty(t, h.probeAt())
	require.Equal(t, deadLetterAllCalls, h.finishCalls())
	require.Equal(t, contract.IncidentDeadLettered, st.State)
	require.Equal(t, "bob@ops", st.ResolvedBy)
	require.Equal(t, "events are obsolete", st.Reason)
	require.NotNil(t, st.CaughtUpAt)
	require.Equal(t, []string{"holding", "dead_lettering", "dead_lettered"}, h.states)
}

func TestIncidentProbeErrorKeepsProbing(t *testing.T) {
	// The first probe's five attempts fail (the database is away), the
	// next probe succeeds.
	h := newIncHarness(t, func(n int) (contract.ProbeResult, error) {
		if n <= 5 {
			return contract.ProbeResult{}, errors.New("probe artist_followers: connection refused")
		}
		return contract.ProbeResult{OK: true, IRVersion: 2}, nil
	})
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	var mid contract.IncidentStatus
	h.at(2*time.Minute, func() { mid = h.status(t) })
	st := h.run(t, incInput(config.IncidentDeadLetter, r))

	// Attempts at 1m, then the activity's retries 1s, 2s, 4s, 8s apart;
	// the next probe 2m after the failed one ended.
	m := time.Minute
	require.Equal(t, []time.Duration{m, m + time.Second, m + 3*time.Second, m + 7*time.Second, m + 15*time.Second, 3*m + 15*time.Second}, h.probeAt())
	require.Equal(t, 1, mid.Probes)
	require.Contains(t, mid.LastProbeError, "connection refused")
	require.Equal(t, at(m+15*time.Second), mid.LastProbeAt)
	require.Equal(t, at(3*m+15*time.Second), mid.NextProbeAt)
	require.Equal(t, contract.IncidentOpen, mid.State)

	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, 2, st.Probes)
	require.Empty(t, st.LastProbeError)
}

// continuedInput returns the input of the run a workflow continued as new.
func continuedInput(t *testing.T, err error) contract.IncidentInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	require.Equal(t, contract.IncidentWorkflowName, can.WorkflowType.Name)
	var in contract.IncidentInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &in))
	return in
}

func TestIncidentContinuesAsNewWithItsStatus(t *testing.T) {
	r := config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: 30 * time.Second}
	h := newIncHarness(t, failing(2))
	h.env.SetContinueAsNewSuggested(true)
	h.at(500*time.Millisecond, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 20, Held: 20, EventIDs: []string{"ev-1", "ev-2"}, At: start})
	})
	h.env.ExecuteWorkflow(contract.IncidentWorkflowName, incInput(config.IncidentHold, r))
	require.True(t, h.env.IsWorkflowCompleted())
	in := continuedInput(t, h.env.GetWorkflowError())
	require.Equal(t, secs(1), h.probeAt(), "the run continues after its failed probe")
	require.Empty(t, h.finishCalls())
	require.Equal(t, incFingerprint, in.Fingerprint)
	require.Equal(t, r, in.Retry)
	require.Equal(t, "ev-1", in.Sample.EventID)
	require.NotNil(t, in.Status)
	require.Equal(t, contract.IncidentHolding, in.Status.State)
	require.Equal(t, 1, in.Status.Probes)
	require.Equal(t, 20, in.Status.EventsAffected)
	require.Equal(t, 20, in.Status.EventsHeld)
	require.Equal(t, []string{"ev-1", "ev-2"}, in.Status.SampleEventIDs)
	require.Equal(t, incError, in.Status.LastProbeError)
	require.Equal(t, start, in.Status.FirstSeen)

	// The next run, an hour on, takes up the backoff where it was (2s
	// after one probe) and keeps the counts.
	later := start.Add(time.Hour)
	h2 := newIncHarness(t, failing(1))
	h2.env.SetStartTime(later)
	h2.at(time.Second, func() {
		h2.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 1, Held: 1, EventIDs: []string{"ev-3"}, At: later.Add(time.Second)})
	})
	st := h2.run(t, in)
	require.Equal(t, []time.Duration{time.Hour + 2*time.Second, time.Hour + 6*time.Second}, h2.probeAt())
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, 3, st.Probes)
	require.Equal(t, 21, st.EventsAffected)
	require.Equal(t, []string{"ev-1", "ev-2", "ev-3"}, st.SampleEventIDs)
	require.Equal(t, start, st.FirstSeen)
	require.Equal(t, later.Add(time.Second), st.LastSeen)
	require.Equal(t, releaseCalls, h2.finishCalls())
	require.Equal(t, []string{"holding", "releasing", "resolved"}, h2.states)
}

// A signal that arrives while the probe runs is delivered with the probe's
// result, and a new run would not get it: the run takes it before it
// continues as new.
func TestIncidentContinueAsNewKeepsSignalsTakenWithTheProbe(t *testing.T) {
	r := config.Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: 30 * time.Second}
	newRun := func(t *testing.T, name string, arg any) *incHarness {
		h := newIncHarness(t, failing(100))
		h.env.SetContinueAsNewSuggested(true)
		h.onProbe = func(n int) {
			if n == 1 {
				h.env.SignalWorkflow(name, arg)
			}
		}
		h.env.ExecuteWorkflow(contract.IncidentWorkflowName, incInput(config.IncidentHold, r))
		require.True(t, h.env.IsWorkflowCompleted())
		return h
	}

	t.Run("failures are counted", func(t *testing.T) {
		h := newRun(t, contract.SignalIncidentFailures, contract.IncidentFailures{Events: 3, Held: 3, EventIDs: []string{"ev-7"}, At: start.Add(time.Second)})
		in := continuedInput(t, h.env.GetWorkflowError())
		require.Equal(t, 1, in.Status.Probes)
		require.Equal(t, 3, in.Status.EventsAffected)
		require.Equal(t, 3, in.Status.EventsHeld)
		require.Equal(t, []string{"ev-7"}, in.Status.SampleEventIDs)
		require.Equal(t, start.Add(time.Second), in.Status.LastSeen)
	})
	t.Run("resolve is honoured", func(t *testing.T) {
		h := newRun(t, contract.SignalResolve, contract.OperatorSignal{Identity: "alice@ops", Reason: "fixed"})
		require.NoError(t, h.env.GetWorkflowError())
		var st contract.IncidentStatus
		require.NoError(t, h.env.GetWorkflowResult(&st))
		require.Equal(t, contract.IncidentResolved, st.State)
		require.Equal(t, "alice@ops", st.ResolvedBy)
		require.Equal(t, 1, st.Probes)
		require.Equal(t, releaseCalls, h.finishCalls())
	})
	t.Run("dead-letter-all is honoured", func(t *testing.T) {
		h := newRun(t, contract.SignalDeadLetterAll, contract.OperatorSignal{Identity: "bob@ops"})
		require.NoError(t, h.env.GetWorkflowError())
		var st contract.IncidentStatus
		require.NoError(t, h.env.GetWorkflowResult(&st))
		require.Equal(t, contract.IncidentDeadLettered, st.State)
		require.Equal(t, deadLetterAllCalls, h.finishCalls())
	})
	t.Run("deployed probes before continuing", func(t *testing.T) {
		h := newRun(t, contract.SignalDeployed, nil)
		in := continuedInput(t, h.env.GetWorkflowError())
		require.Equal(t, secs(1, 1), h.probeAt())
		require.Equal(t, 2, in.Status.Probes)
	})
}

// A hold nobody resolves ends at CAUSET_INCIDENT_HOLD_MAX with its events
// dead-lettered.
func TestIncidentHoldMaxDeadLettersHeldEvents(t *testing.T) {
	h := newIncHarness(t, failing(1000))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	in := incInput(config.IncidentHold, r)
	in.HoldMax = 2 * time.Hour
	st := h.run(t, in)
	require.Equal(t, contract.IncidentDeadLettered, st.State)
	require.Equal(t, "hold_max", st.ResolvedBy)
	require.Equal(t, at(2*time.Hour), st.ResolvedAt)
	require.Equal(t, deadLetterAllCalls, h.finishCalls())
	require.NotEmpty(t, h.probeAt(), "it probed meanwhile")
	require.Less(t, h.probeAt()[len(h.probeAt())-1], 2*time.Hour)
}

// The hold's deadline is one timer for the run, not one per probe: a
// history stays short however long the hold.
func TestIncidentHoldDeadlineIsArmedOnce(t *testing.T) {
	h := newIncHarness(t, failing(1000))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	in := incInput(config.IncidentHold, r)
	in.HoldMax = 2 * time.Hour
	var deadlines []time.Duration
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		if d > r.Max {
			deadlines = append(deadlines, d)
		}
	})
	var details string
	h.at(90*time.Minute, func() {
		v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
		require.NoError(t, err)
		var md sdkpb.WorkflowMetadata
		require.NoError(t, v.Get(&md))
		details = md.GetCurrentDetails()
	})
	st := h.run(t, in)
	require.Equal(t, "hold_max", st.ResolvedBy)
	require.Greater(t, len(h.probeAt()), 10, "it probed all along")
	require.Equal(t, []time.Duration{2 * time.Hour}, deadlines, "one deadline timer for the whole hold")
	require.Contains(t, details, "**holding**")
	require.Contains(t, details, "last probe failed: "+incError)
}

// A hold that reaches CAUSET_INCIDENT_MAX_HELD events dead-letters them.
func TestIncidentMaxHeldDeadLettersHeldEvents(t *testing.T) {
	h := newIncHarness(t, failing(1000))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	in := incInput(config.IncidentHold, r)
	in.MaxHeld = 100
	h.at(10*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 60, Held: 60})
	})
	h.at(20*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 50, Held: 50})
	})
	st := h.run(t, in)
	require.Equal(t, contract.IncidentDeadLettered, st.State)
	require.Equal(t, "max_held", st.ResolvedBy)
	require.Equal(t, 110, st.EventsHeld)
	require.Equal(t, at(20*time.Second), st.ResolvedAt)
	require.Empty(t, h.probeAt(), "decided before the first probe was due")
	require.Equal(t, deadLetterAllCalls, h.finishCalls())
}

// An informational incident (policy dead-letter) whose failure is no longer
// reported closes instead of probing forever; a hold does not.
func TestIncidentDeadLetterPolicyClosesWhenQuiet(t *testing.T) {
	h := newIncHarness(t, failing(1000))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	in := incInput(config.IncidentDeadLetter, r)
	in.QuietClose = 5 * time.Minute
	h.at(2*time.Minute, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Events: 3, At: h.env.Now().UTC()})
	})
	st := h.run(t, in)
	m := time.Minute
	require.Equal(t, []time.Duration{m, 3 * m, 7 * m}, h.probeAt(), "probing stops at the first probe 5m or more after the last failure (at 2m)")
	require.Equal(t, contract.IncidentResolved, st.State)
	require.Equal(t, "quiet", st.ResolvedBy)
	require.Equal(t, []incCall{setState(contract.IncidentResolved)}, h.finishCalls())
}

// A run restarted from a row that was dead-lettering its held events (its
// workflow ended meanwhile) finishes the dead-letter-all: it neither probes
// nor releases, and keeps the row's counts.
func TestIncidentRestartedWhileDeadLettering(t *testing.T) {
	h := newIncHarness(t, failing(0))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	in := incInput(config.IncidentHold, r)
	opened := start.Add(-time.Hour)
	row := incident.Row{ID: incID, State: contract.IncidentDeadLettering, Input: in, OpenedAt: opened, EventsAffected: 40, EventsHeld: 55}
	st := h.run(t, row.RestartInput(start))
	require.Empty(t, h.probeAt())
	require.Equal(t, deadLetterAllCalls, h.finishCalls())
	require.Equal(t, contract.IncidentDeadLettered, st.State)
	require.Equal(t, "restarted", st.ResolvedBy)
	require.Equal(t, 40, st.EventsAffected)
	require.Equal(t, 55, st.EventsHeld)
	require.Equal(t, opened, st.FirstSeen, "the hold's opening time stands")
}

// A failures report sent twice (the first send's answer was lost) counts
// once; another report counts.
func TestIncidentCountsAReportOnce(t *testing.T) {
	h := newIncHarness(t, failing(1))
	r := config.Retry{MaxAttempts: 5, Initial: time.Minute, Multiplier: 2, Max: 5 * time.Minute}
	report := contract.IncidentFailures{Key: "bridge-a/1", Events: 3, Held: 5, EventIDs: []string{"ev-1"}, At: start.Add(time.Second)}
	h.at(time.Second, func() { h.env.SignalWorkflow(contract.SignalIncidentFailures, report) })
	h.at(2*time.Second, func() { h.env.SignalWorkflow(contract.SignalIncidentFailures, report) })
	h.at(3*time.Second, func() {
		h.env.SignalWorkflow(contract.SignalIncidentFailures, contract.IncidentFailures{Key: "bridge-a/2", Events: 1, Held: 1, At: start.Add(3 * time.Second)})
	})
	st := h.run(t, incInput(config.IncidentHold, r))
	require.Equal(t, 4, st.EventsAffected)
	require.Equal(t, 6, st.EventsHeld)
	require.Equal(t, []string{"ev-1"}, st.SampleEventIDs)
}

// A bridge that reopens the row (a new hold) just after the run's final
// move finds the run still open and signals it: the run takes the new hold
// over, continuing as new from the row, rather than close and leave it
// without a run. A late report of its own hold (the row has ended) counts
// and the run completes.
func TestIncidentTakesOverItsReopenedRow(t *testing.T) {
	report := contract.IncidentFailures{Key: "bridge-a/9", Events: 2, Held: 2, EventIDs: []string{"ev-new"}, At: start.Add(time.Minute)}
	afterFinalMove := func(h *incHarness) {
		h.onSetState = func(in contract.SetIncidentStateInput) {
			if in.State == contract.IncidentResolved {
				h.env.SignalWorkflow(contract.SignalIncidentFailures, report)
			}
		}
	}

	h := newIncHarness(t, failing(0))
	afterFinalMove(h)
	in := incInput(config.IncidentHold, config.DefaultRetry())
	reopened := incident.Row{ID: incID, State: contract.IncidentHolding, Input: in, OpenedAt: start.Add(time.Minute), EventsAffected: 2, EventsHeld: 2}
	next := reopened.RestartInput(start.Add(time.Minute))
	h.restart = &next
	h.env.ExecuteWorkflow(contract.IncidentWorkflowName, in)
	require.True(t, h.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, h.env.GetWorkflowError(), &can, "the run continues as new with the reopened hold")
	var got contract.IncidentInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &got))
	require.Equal(t, contract.IncidentHolding, got.Status.State)
	require.Nil(t, got.Status.ResolvedAt, "the new hold is undecided: it probes")
	require.Equal(t, start.Add(time.Minute), got.Status.FirstSeen, "its deadline runs from the reopen")
	require.Equal(t, append(slices.Clone(releaseCalls), incCall{Name: contract.IncidentRestartActivity, Arg: incID}), h.finishCalls())

	h = newIncHarness(t, failing(0))
	afterFinalMove(h)
	st := h.run(t, in)
	require.Equal(t, contract.IncidentResolved, st.State, "the row had ended: a late report of its own hold")
	require.Equal(t, 2, st.EventsAffected)
}
