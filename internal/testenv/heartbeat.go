package testenv

import (
	"context"

	"go.temporal.io/sdk/interceptor"
)

// OnHeartbeat is a worker interceptor that hands the details of every
// activity.RecordHeartbeat call to fn before the SDK batches them (the
// heartbeat then goes on as usual). fn may be called from several
// activities at once.
func OnHeartbeat(fn func(ctx context.Context, details []any)) interceptor.WorkerInterceptor {
	return &heartbeatWorker{fn: fn}
}

type heartbeatWorker struct {
	interceptor.WorkerInterceptorBase
	fn func(context.Context, []any)
}

func (w *heartbeatWorker) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &heartbeatInbound{fn: w.fn}
	i.Next = next
	return i
}

type heartbeatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	fn func(context.Context, []any)
}

func (i *heartbeatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	o := &heartbeatOutbound{fn: i.fn}
	o.Next = outbound
	return i.Next.Init(o)
}

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	fn func(context.Context, []any)
}

func (o *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	o.fn(ctx, details)
	o.Next.RecordHeartbeat(ctx, details...)
}
