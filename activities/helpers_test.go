package activities_test

// Fixtures, fakes and the harness shared by the activities' tests.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const projectionName = "artist_followers"

var occurred = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func followed(id, user, artist string) event.Envelope {
	return event.Envelope{EventID: id, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production",
		OccurredAt: occurred, Payload: json.RawMessage(fmt.Sprintf(`{"artistId":%q}`, artist))}
}

// defaultDelays is the plan of a 5-attempt run: the waits after attempts 1..4.
var defaultDelays = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// applyInput is ApplyProjection's input for an activity whose first attempt
// is overall attempt first (the test environment always runs activity
// attempt 1, so first is the attempt number the activity sees).
func applyInput(ev event.Envelope, first int) contract.ApplyInput {
	return contract.ApplyInput{Event: ev, Projection: projectionName, FirstAttempt: first, Delays: defaultDelays, MaxAttempts: 5}
}

// fakeApplier answers Apply with fn and records each call, with how many
// heartbeats had been recorded when it ran.
type fakeApplier struct {
	mu    sync.Mutex
	calls []applyCall
	hb    *heartbeatLog
	fn    func(ctx context.Context, n int) (projection.Result, error)
}

type applyCall struct {
	projection      string
	event           event.Envelope
	heartbeatsAtRun int
}

func (f *fakeApplier) ApplyWith(ctx context.Context, name string, ev event.Envelope, _ projection.ApplyOptions) (projection.Result, error) {
	f.mu.Lock()
	n := len(f.calls)
	hb := 0
	if f.hb != nil {
		hb = f.hb.count()
	}
	f.calls = append(f.calls, applyCall{projection: name, event: ev, heartbeatsAtRun: hb})
	f.mu.Unlock()
	if f.fn == nil {
		return projection.Result{Projection: name, EventID: ev.EventID, Status: projection.StatusApplied, IRVersion: 1}, nil
	}
	return f.fn(ctx, n)
}

func (f *fakeApplier) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// fakePublisher records what PublishDeadLetter hands it.
type fakePublisher struct {
	mu      sync.Mutex
	keys    [][]byte
	records []dlq.Record
	err     error
	at      contract.DLQCoordinates
}

func (p *fakePublisher) Publish(_ context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, key)
	p.records = append(p.records, r)
	if p.err != nil {
		return contract.DLQCoordinates{}, p.err
	}
	return p.at, nil
}

// heartbeatLog records every activity.RecordHeartbeat call (before the SDK
// batches them) through testenv.OnHeartbeat.
type heartbeatLog struct {
	mu    sync.Mutex
	calls [][]any
}

func (h *heartbeatLog) add(details []any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cp := make([]any, len(details))
	for i, d := range details {
		if a, ok := d.([]contract.Attempt); ok {
			d = slices.Clone(a) // a snapshot: the activity may append to the slice later
		}
		cp[i] = d
	}
	h.calls = append(h.calls, cp)
}

func (h *heartbeatLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// attempts returns the attempts recorded by each heartbeat that carried them.
func (h *heartbeatLog) attempts(t *testing.T) [][]contract.Attempt {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][]contract.Attempt
	for _, c := range h.calls {
		require.Len(t, c, 1, "ApplyProjection heartbeats with one detail, its attempts")
		a, ok := c[0].([]contract.Attempt)
		require.True(t, ok, "heartbeat detail is %T, want []contract.Attempt", c[0])
		out = append(out, a)
	}
	return out
}

// onlyLine returns the single log line whose msg is msg.
func onlyLine(t *testing.T, logs *testenv.LogBuffer, msg string) map[string]any {
	t.Helper()
	found := logs.Where(t, "msg", msg)
	require.Len(t, found, 1, "log lines %q", msg)
	return found[0]
}

// harness runs the activities in a TestActivityEnvironment with a metrics
// registry, a JSON log and a heartbeat recorder.
type harness struct {
	env  *testsuite.TestActivityEnvironment
	acts *activities.Activities
	reg  *prometheus.Registry
	logs *testenv.LogBuffer
	hb   *heartbeatLog
}

func newHarness(t *testing.T, applier activities.Applier, pub activities.DeadLetterPublisher) *harness {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	h := &harness{env: s.NewTestActivityEnvironment(), reg: prometheus.NewRegistry(), logs: &testenv.LogBuffer{}, hb: &heartbeatLog{}}
	if f, ok := applier.(*fakeApplier); ok {
		f.hb = h.hb
	}
	h.acts = &activities.Activities{
		Applier:   applier,
		Publisher: pub,
		Logger:    slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:   activities.NewMetrics(h.reg),
	}
	h.env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{
		testenv.OnHeartbeat(func(_ context.Context, details []any) { h.hb.add(details) }),
	}})
	h.env.RegisterActivityWithOptions(h.acts.ApplyProjection, activity.RegisterOptions{Name: contract.ApplyProjectionActivity})
	h.env.RegisterActivityWithOptions(h.acts.PublishDeadLetter, activity.RegisterOptions{Name: contract.PublishDeadLetterActivity})
	return h
}

func (h *harness) apply(in contract.ApplyInput) (contract.ApplyOutput, error) {
	v, err := h.env.ExecuteActivity(contract.ApplyProjectionActivity, in)
	if err != nil {
		return contract.ApplyOutput{}, err
	}
	var out contract.ApplyOutput
	if err := v.Get(&out); err != nil {
		return contract.ApplyOutput{}, err
	}
	return out, nil
}

// counter is the value of the counter name with exactly labels (0 if it
// was never incremented).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// total sums every series of the counter name.
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

const (
	retriesTotal     = "causet_projection_retries_total"
	deadLettersTotal = "causet_projection_dead_letters_total"
	publishedTotal   = "causet_projection_dead_letters_published_total"
	replaysTotal     = "causet_projection_replays_succeeded_total"
)

// applicationError unwraps the ApplicationError an activity failed with and
// decodes its details, the attempts so far.
func applicationError(t *testing.T, err error) (*temporal.ApplicationError, []contract.Attempt) {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an ApplicationError, got %T: %v", err, err)
	var attempts []contract.Attempt
	require.NoError(t, ae.Details(&attempts))
	return ae, attempts
}
