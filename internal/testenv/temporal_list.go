package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// WorkflowExecution is one workflow run as visibility lists it.
type WorkflowExecution struct {
	// ID and RunID name the run.
	ID, RunID string
	// Type is the workflow type's name.
	Type string
	// Status is the run's status (running, completed, terminated, ...).
	Status enums.WorkflowExecutionStatus
	// Start is when the run started.
	Start time.Time
}

// Running reports whether the run is still open.
func (e WorkflowExecution) Running() bool {
	return e.Status == enums.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// ListWorkflows lists every run in s's namespace that the visibility query
// matches (e.g. `CausetRetryState="dead_lettered"`), all pages; the test fails
// if a page cannot be listed. Visibility is eventually consistent: a run
// started a moment ago may not be listed yet.
func (s TemporalServer) ListWorkflows(t testing.TB, query string) []WorkflowExecution {
	t.Helper()
	var out []WorkflowExecution
	var token []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Namespace, Query: query, NextPageToken: token, PageSize: 1000,
		})
		cancel()
		if err != nil {
			t.Fatalf("testenv: list workflows %q: %v", query, err)
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, WorkflowExecution{
				ID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId(),
				Type: e.GetType().GetName(), Status: e.GetStatus(), Start: e.GetStartTime().AsTime(),
			})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out
		}
	}
}

// WorkflowsOnQueue lists every run started on taskQueue, of the workflow
// type workflowType ("" for any).
func (s TemporalServer) WorkflowsOnQueue(t testing.TB, taskQueue, workflowType string) []WorkflowExecution {
	t.Helper()
	query := fmt.Sprintf("TaskQueue = %q", taskQueue)
	if workflowType != "" {
		query += fmt.Sprintf(" AND WorkflowType = %q", workflowType)
	}
	return s.ListWorkflows(t, query)
}

// WorkflowIDs returns the IDs of runs, in their order (an ID twice when it
// has two runs).
func WorkflowIDs(runs []WorkflowExecution) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

// DescribeWorkflow describes the latest run of workflow id through the raw
// service API (pending activities, search attributes, close time, ...).
func (s TemporalServer) DescribeWorkflow(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Client.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: s.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id},
	})
}

// QueryWorkflow runs the query queryType on the latest run of workflow id
// and decodes its answer into out.
func (s TemporalServer) QueryWorkflow(id, queryType string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.Client.QueryWorkflow(ctx, id, "", queryType)
	if err != nil {
		return err
	}
	return v.Get(out)
}

// WaitWorkflowStatus waits until the latest run of workflow id has one of
// statuses and returns its description; the test fails if within passes
// first.
func (s TemporalServer) WaitWorkflowStatus(t testing.TB, id string, within time.Duration, statuses ...enums.WorkflowExecutionStatus) *workflowservice.DescribeWorkflowExecutionResponse {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		d, err := s.DescribeWorkflow(id)
		if err == nil {
			st := d.GetWorkflowExecutionInfo().GetStatus()
			for _, want := range statuses {
				if st == want {
					return d
				}
			}
			last = st.String()
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: workflow %s is not %v within %s (last: %s)", id, statuses, within, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitQuery runs the query queryType on the latest run of workflow id with
// c until its answer, decoded into a T, satisfies ok, and returns that
// answer; the test fails if within passes first.
func WaitQuery[T any](t testing.TB, ctx context.Context, c client.Client, id, queryType string, within time.Duration, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(within)
	var last T
	var lastErr error
	for {
		var answer T
		v, err := c.QueryWorkflow(ctx, id, "", queryType)
		if err == nil {
			err = v.Get(&answer)
		}
		if err == nil {
			if ok(answer) {
				return answer
			}
			last = answer
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("testenv: workflow %s: no answer to %s as the test wants within %s (last: %+v, error: %v)", id, queryType, within, last, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
