package tracing

import (
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/contract"
)

// workflowSpanKey is the workflow-context key under which the SDK's tracing
// interceptor keeps the current span; ours, so heldEventTrace can set it.
type workflowSpanKey struct{}

// heldEventTrace keeps a held event in its own trace. A lane starts the
// retry workflow of each event it holds as its child, and the SDK would
// parent that start on the lane's own span, in the trace of the event that
// opened the lane. The bridge sends the held event's trace context with it
// (contract.RetryInput.TraceContext); this interceptor starts the child in
// a "ReleaseFromLane" span of that trace, so its attempts and its dead
// letter join the event's trace. Spans are only started when the workflow
// is not replaying, as the SDK's own workflow spans are.
type heldEventTrace struct {
	interceptor.InterceptorBase
	tracer interceptor.Tracer
}

func (h *heldEventTrace) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &heldEventInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, tracer: h.tracer}
}

type heldEventInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	tracer interceptor.Tracer
}

func (i *heldEventInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&heldEventOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, tracer: i.tracer})
}

type heldEventOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	tracer interceptor.Tracer
}

func (o *heldEventOutbound) ExecuteChildWorkflow(ctx workflow.Context, childType string, args ...any) workflow.ChildWorkflowFuture {
	if childType != contract.RetryWorkflowName || len(args) != 1 || workflow.IsReplaying(ctx) {
		return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
	}
	in, ok := args[0].(contract.RetryInput)
	if !ok || len(in.TraceContext) == 0 {
		return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
	}
	// A context that cannot be read leaves the child in the lane's trace:
	// tracing never stops an event.
	parent, err := o.tracer.UnmarshalSpan(in.TraceContext)
	if err != nil || parent == nil {
		return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
	}
	span, err := o.tracer.StartSpan(&interceptor.TracerStartSpanOptions{
		Parent:    parent,
		Operation: "ReleaseFromLane",
		Name:      childType,
		Time:      workflow.Now(ctx),
		Tags: map[string]string{
			"causet.workflow_id": in.WorkflowID(),
			"causet.lane_id":     workflow.GetInfo(ctx).WorkflowExecution.ID,
		},
	})
	if err != nil {
		return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
	}
	defer span.Finish(&interceptor.TracerFinishSpanOptions{})
	return o.Next.ExecuteChildWorkflow(workflow.WithValue(ctx, workflowSpanKey{}, span), childType, args...)
}
