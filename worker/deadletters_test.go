package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/worker"
)

// fakeLister serves pages of executions and records the requests.
type fakeLister struct {
	pages [][]*workflowpb.WorkflowExecutionInfo
	reqs  []*workflowservice.ListWorkflowExecutionsRequest
	err   error
}

func (f *fakeLister) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	i := 0
	if len(req.NextPageToken) > 0 {
		i = int(req.NextPageToken[0])
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: f.pages[i]}
	if i+1 < len(f.pages) {
		resp.NextPageToken = []byte{byte(i + 1)}
	}
	return resp, nil
}

func payload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

// deadLetterRun is a listed run of projection; with deadLetteredAt set it
// carries the memo of a current worker, else only its start time.
func deadLetterRun(t *testing.T, projection string, started, deadLetteredAt time.Time, kind string) *workflowpb.WorkflowExecutionInfo {
	e := &workflowpb.WorkflowExecutionInfo{
		StartTime: timestamppb.New(started),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			contract.AttrProjection.GetName(): payload(t, projection),
			contract.AttrRetryState.GetName(): payload(t, string(contract.StateDeadLettered)),
		}},
	}
	if !deadLetteredAt.IsZero() {
		e.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{
			contract.MemoDeadLetteredAt: payload(t, deadLetteredAt),
			contract.MemoErrorKind:      payload(t, kind),
		}}
	}
	return e
}

// gauges reads the monitor's series: name → "projection/error_kind" → value.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			key := ""
			if len(l) > 0 {
				key = l["projection"] + "/" + l["error_kind"]
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			series[key] = v
		}
		out[mf.GetName()] = series
	}
	return out
}

// The monitor lists every page of open dead letters on its task queue and
// exports, per projection and error kind, their number and the age of the
// oldest, taken from the dead-letter time in the memo (a run without one,
// dead-lettered by an older worker, counts from its start).
func TestDeadLetterMonitorGauges(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clock := now
	f := &fakeLister{pages: [][]*workflowpb.WorkflowExecutionInfo{
		{
			deadLetterRun(t, "artist_followers", now.Add(-3*time.Hour), now.Add(-10*time.Minute), "sql"),
			deadLetterRun(t, "artist_followers", now.Add(-time.Hour), now.Add(-50*time.Minute), "sql"),
		},
		{
			deadLetterRun(t, "artist_stats", now.Add(-20*time.Minute), now.Add(-5*time.Minute), "ir_eval"),
			deadLetterRun(t, "artist_stats", now.Add(-2*time.Hour), time.Time{}, ""),
		},
	}}
	reg := prometheus.NewRegistry()
	m, err := worker.NewDeadLetterMonitor(worker.DeadLetterMonitorOptions{
		Client: f, Namespace: "ns", TaskQueue: "causet-projections", Registerer: reg, Now: func() time.Time { return clock },
	})
	require.NoError(t, err)
	require.Empty(t, gauges(t, reg)["causet_projection_dead_letters_open"], "nothing before the first scan")

	require.NoError(t, m.Scan(context.Background()))
	require.Len(t, f.reqs, 2, "every page")
	require.Equal(t, "ns", f.reqs[0].Namespace)
	require.Equal(t, `WorkflowType = "ProjectionRetryWorkflow" AND ExecutionStatus = "Running" AND CausetRetryState = "dead_lettered" AND TaskQueue = "causet-projections"`, f.reqs[0].Query)
	g := gauges(t, reg)
	require.Equal(t, map[string]float64{"artist_followers/sql": 2, "artist_stats/ir_eval": 1, "artist_stats/unknown": 1}, g["causet_projection_dead_letters_open"])
	require.Equal(t, map[string]float64{"artist_followers/sql": 3000, "artist_stats/ir_eval": 300, "artist_stats/unknown": 7200}, g["causet_projection_dead_letter_oldest_age_seconds"])
	require.Equal(t, float64(now.Unix()), g["causet_projection_dead_letter_scan_timestamp_seconds"][""])

	// The age grows between scans; a failed scan keeps the values and counts.
	clock = now.Add(time.Minute)
	f.err = errors.New("visibility unavailable")
	require.Error(t, m.Scan(context.Background()))
	g = gauges(t, reg)
	require.Equal(t, 3060.0, g["causet_projection_dead_letter_oldest_age_seconds"]["artist_followers/sql"])
	require.Equal(t, 1.0, g["causet_projection_dead_letter_scan_failures_total"][""])
	require.Equal(t, float64(now.Unix()), g["causet_projection_dead_letter_scan_timestamp_seconds"][""])

	// Replayed: the series go.
	f.err = nil
	f.pages = [][]*workflowpb.WorkflowExecutionInfo{{}}
	require.NoError(t, m.Scan(context.Background()))
	g = gauges(t, reg)
	require.Empty(t, g["causet_projection_dead_letters_open"])
	require.Empty(t, g["causet_projection_dead_letter_oldest_age_seconds"])
}
