package workflows_test

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/workflows"
)

// capturedMetrics is a client.MetricsHandler that keeps counter totals by
// name and tags.
type capturedMetrics struct {
	mu     *sync.Mutex
	tags   map[string]string
	counts map[string]int64
}

func newCapturedMetrics() *capturedMetrics {
	return &capturedMetrics{mu: &sync.Mutex{}, tags: map[string]string{}, counts: map[string]int64{}}
}

func (m *capturedMetrics) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(m.tags)
	maps.Copy(merged, tags)
	return &capturedMetrics{mu: m.mu, tags: merged, counts: m.counts}
}

func (m *capturedMetrics) Counter(name string) client.MetricsCounter {
	return counterFunc(func(d int64) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.counts[seriesKey(name, m.tags)] += d
	})
}

func (m *capturedMetrics) Gauge(string) client.MetricsGauge {
	return client.MetricsNopHandler.Gauge("")
}

func (m *capturedMetrics) Timer(string) client.MetricsTimer {
	return client.MetricsNopHandler.Timer("")
}

// count is the total of the counter name over the series whose tags include want.
func (m *capturedMetrics) count(name string, want map[string]string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for key, v := range m.counts {
		if !strings.HasPrefix(key, name+"{") {
			continue
		}
		ok := true
		for k, w := range want {
			ok = ok && strings.Contains(key, k+"="+w+",")
		}
		if ok {
			n += v
		}
	}
	return n
}

func seriesKey(name string, tags map[string]string) string {
	var b strings.Builder
	b.WriteString(name + "{")
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		b.WriteString(k + "=" + tags[k] + ",")
	}
	return b.String() + "}"
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

// observed is a harness whose workflow logs and SDK metrics are kept.
type observed struct {
	*harness
	logs    *testenv.LogBuffer
	metrics *capturedMetrics
}

func newObserved(t *testing.T, applyFailures int) *observed {
	t.Helper()
	o := &observed{logs: &testenv.LogBuffer{}, metrics: newCapturedMetrics()}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewJSONHandler(o.logs, nil))))
	s.SetMetricsHandler(o.metrics)
	applier := &fakeApplier{failures: applyFailures}
	applier.err = errFollowedAt
	publisher := &fakePublisher{}
	a := &activities.Activities{Applier: applier, Publisher: publisher, Logger: slog.New(slog.DiscardHandler)}
	o.harness = &harness{env: s.NewTestWorkflowEnvironment(), applier: applier, publisher: publisher}
	o.env.SetStartTime(start)
	o.env.RegisterWorkflowWithOptions(workflows.ProjectionRetryWorkflow, workflow.RegisterOptions{Name: contract.RetryWorkflowName})
	o.env.RegisterActivityWithOptions(a.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	o.env.RegisterActivityWithOptions(a.PublishDeadLetter, activity.RegisterOptions{Name: contract.PublishDeadLetterActivity})
	o.env.RegisterActivityWithOptions(a.SettleHead, activity.RegisterOptions{Name: contract.SettleHeadActivity})
	o.env.RegisterActivityWithOptions(a.JoinIncidentHold, activity.RegisterOptions{Name: contract.JoinIncidentHoldActivity})
	o.env.RegisterActivityWithOptions(a.AwaitIncidentEnded, activity.RegisterOptions{Name: contract.AwaitIncidentEndedActivity})
	return o
}

var errFollowedAt = errString(`column "followed_at" of relation "artist_followers" does not exist`)

type errString string

func (e errString) Error() string { return string(e) }

func (o *observed) actionCount(action, outcome string) int64 {
	return o.metrics.count(contract.MetricOperatorActions, map[string]string{
		"projection": "artist_followers", "action": action, "outcome": outcome,
	})
}

// requireOneReplay requires that the run logged one operator action, with
// outcome, identity and state, and counted it as a replay.
func (o *observed) requireOneReplay(t *testing.T, outcome, identity, state string) {
	t.Helper()
	lines := o.logs.Where(t, "event", "projection_operator_action")
	require.Len(t, lines, 1)
	require.Equal(t, outcome, lines[0]["outcome"])
	require.Equal(t, identity, lines[0]["identity"])
	require.Equal(t, state, lines[0]["state"])
	require.EqualValues(t, 1, o.actionCount("replay", outcome))
}

// Every replay and discard is logged with the identity and reason its
// payload names, and counted by action and outcome; two replays queued
// together (here sent while the event was still retrying) are one replay,
// the second logged as coalesced; a bare string payload is the reason.
func TestOperatorActionsAreLoggedAndCounted(t *testing.T) {
	o := newObserved(t, 100)
	o.env.RegisterDelayedCallback(func() {
		require.Equal(t, contract.StateRetrying, o.status(t).State)
		o.env.SignalWorkflow(contract.SignalReplay, contract.OperatorSignal{Identity: "alice@ops", Reason: "IR v2 deployed"})
		o.env.SignalWorkflow(contract.SignalReplay, map[string]string{"identity": "batch:bob", "reason": "bulk replay"})
	}, 1500*time.Millisecond)
	o.env.RegisterDelayedCallback(func() {
		s := o.status(t)
		require.Equal(t, contract.StateDeadLettered, s.State)
		require.Equal(t, 1, s.ReplayCount)
		o.env.SignalWorkflow(contract.SignalDiscard, "superseded by ev-2")
	}, 10*time.Minute)
	s := o.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateDiscarded, s.State)
	require.Equal(t, 1, s.ReplayCount, "the queued replays made one replay")
	require.Equal(t, "IR v2 deployed", s.LastReplayReason)
	require.Equal(t, &contract.OperatorAction{Action: "discard", Reason: "superseded by ev-2", At: start.Add(10 * time.Minute)}, s.LastAction)

	lines := o.logs.Where(t, "event", "projection_operator_action")
	require.Len(t, lines, 3)
	want := []struct{ action, outcome, identity, reason, state string }{
		{"replay", "acted", "alice@ops", "IR v2 deployed", "dead_lettered"},
		{"replay", "coalesced", "batch:bob", "bulk replay", "dead_lettered"},
		{"discard", "acted", "", "superseded by ev-2", "dead_lettered"},
	}
	for i, w := range want {
		l := lines[i]
		require.Equal(t, "INFO", l["level"])
		require.Equal(t, w.action, l["action"], "line %d", i)
		require.Equal(t, w.outcome, l["outcome"], "line %d", i)
		require.Equal(t, w.identity, l["identity"], "line %d", i)
		require.Equal(t, w.reason, l["reason"], "line %d", i)
		require.Equal(t, w.state, l["state"], "line %d", i)
		require.Equal(t, "artist_followers", l["projectionName"])
		require.Equal(t, "ARTIST_FOLLOWED", l["eventType"])
		require.Equal(t, "user-123", l["entityId"])
		require.Equal(t, "production", l["forkId"])
		require.Equal(t, "ev-1", l["eventId"])
		require.Equal(t, "default-test-workflow-id", l["workflowId"])
	}
	require.EqualValues(t, 1, o.actionCount("replay", "acted"))
	require.EqualValues(t, 1, o.actionCount("replay", "coalesced"))
	require.EqualValues(t, 1, o.actionCount("discard", "acted"))
	require.EqualValues(t, 3, o.metrics.count(contract.MetricOperatorActions, map[string]string{"projection": "artist_followers"}))
}

// A signal still queued when the run closes is logged and counted as
// ignored: here a replay sent while the event was still retrying, which
// then succeeded.
func TestSignalLeftAtCloseIsLoggedIgnored(t *testing.T) {
	o := newObserved(t, 1) // attempt 2 fails, attempt 3 applies
	o.env.RegisterDelayedCallback(func() {
		require.Equal(t, contract.StateRetrying, o.status(t).State)
		o.env.SignalWorkflow(contract.SignalReplay, contract.OperatorSignal{Identity: "carol", Reason: "too early"})
	}, 1500*time.Millisecond)
	s := o.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Zero(t, s.ReplayCount)
	require.Nil(t, s.LastAction)
	o.requireOneReplay(t, "ignored", "carol", "succeeded")
}

// A run started by a bulk replay of a closed dead letter logs and counts the
// replay that started it.
func TestRestartedRunLogsItsReplay(t *testing.T) {
	o := newObserved(t, 0)
	in := input(config.ModeWorkflow, config.DefaultRetry())
	in.Replay = &contract.OperatorSignal{Identity: "dave", Reason: "window expired, fixed now"}
	s := o.run(t, in)
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, "window expired, fixed now", s.LastReplayReason)
	o.requireOneReplay(t, "restarted", "dave", "retrying")
}

// Each dead letter records its time and error kind in the memo, which the
// worker's dead-letter gauges read from visibility.
func TestDeadLetterTimeAndKindInMemo(t *testing.T) {
	o := newObserved(t, 100)
	var memos []map[string]any
	o.env.OnUpsertMemo(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		memos = append(memos, args.Get(0).(map[string]any))
	})
	o.env.RegisterDelayedCallback(func() { o.env.SignalWorkflow(contract.SignalReplay, nil) }, time.Minute)
	o.env.RegisterDelayedCallback(func() { o.env.SignalWorkflow(contract.SignalDiscard, nil) }, 10*time.Minute)
	// The last attempt of each run starts 15 s into it.
	deadLettered := []time.Time{start.Add(15 * time.Second), start.Add(time.Minute + 15*time.Second)}
	o.env.ExecuteWorkflow(contract.RetryWorkflowName, input(config.ModeInline, config.DefaultRetry()))
	require.NoError(t, o.env.GetWorkflowError())
	require.Len(t, memos, 2, "one per dead letter")
	for i, m := range memos {
		require.Equal(t, "sql", m[contract.MemoErrorKind])
		at, ok := m[contract.MemoDeadLetteredAt].(time.Time)
		require.True(t, ok, "%T", m[contract.MemoDeadLetteredAt])
		require.False(t, at.Before(deadLettered[i]), "after the last attempt: %s", at)
		require.Less(t, at.Sub(deadLettered[i]), time.Second)
	}
	// Signals without a payload are still decisions.
	lines := o.logs.Where(t, "event", "projection_operator_action")
	require.Len(t, lines, 2)
	require.Equal(t, "", lines[0]["identity"])
	require.Equal(t, "discard", lines[1]["action"])
}

// A replay whose payload is not the documented object (here a bare string,
// a common --input slip) still replays, the string as its reason.
func TestReplayWithAnyPayloadReplays(t *testing.T) {
	o := newObserved(t, 5) // attempts 2..5 fail, the replay applies
	o.env.RegisterDelayedCallback(func() { o.env.SignalWorkflow(contract.SignalReplay, "fixed by hand") }, time.Minute)
	s := o.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, 1, s.ReplayCount)
	require.Equal(t, "fixed by hand", s.LastReplayReason)
	lines := o.logs.Where(t, "event", "projection_operator_action")
	require.Len(t, lines, 1)
	require.Equal(t, "acted", lines[0]["outcome"])
}

// Runs from before changeAnyReplayPayload skipped such a replay as if never
// sent and waited on; their histories replay the same (logged as ignored).
func TestReplayWithAnyPayloadBeforeTheChange(t *testing.T) {
	o := newObserved(t, 5)
	o.env.OnGetVersion("any-replay-payload", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	o.env.RegisterDelayedCallback(func() { o.env.SignalWorkflow(contract.SignalReplay, "fixed by hand") }, time.Minute)
	o.env.RegisterDelayedCallback(func() {
		require.Equal(t, contract.StateDeadLettered, o.status(t).State, "still waiting")
		o.env.SignalWorkflow(contract.SignalReplay, contract.OperatorSignal{Reason: "fixed"})
	}, 2*time.Minute)
	s := o.run(t, input(config.ModeInline, config.DefaultRetry()))
	require.Equal(t, contract.StateSucceeded, s.State)
	require.Equal(t, 1, s.ReplayCount)
	require.Equal(t, "fixed", s.LastReplayReason)
	lines := o.logs.Where(t, "event", "projection_operator_action")
	require.Len(t, lines, 2)
	require.Equal(t, "ignored", lines[0]["outcome"])
	require.Equal(t, "fixed by hand", lines[0]["reason"])
	require.Equal(t, "acted", lines[1]["outcome"])
}
