package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/parking"
)

// loseFirstCompletion lets the first attempt of every activity run to its
// end and then fails it, as a completion lost while Temporal is unreachable
// does: the server retries an activity whose work is done.
type loseFirstCompletion struct {
	interceptor.WorkerInterceptorBase
}

func (*loseFirstCompletion) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &lostCompletion{}
	i.Next = next
	return i
}

type lostCompletion struct {
	interceptor.ActivityInboundInterceptorBase
}

func (i *lostCompletion) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	out, err := i.Next.ExecuteActivity(ctx, in)
	if err == nil && activity.GetInfo(ctx).Attempt == 1 {
		return nil, errors.New("the completion was lost: Temporal unreachable")
	}
	return out, err
}

// A PublishDeadLetter whose record was written but whose completion was lost
// is retried: the retry finds the record and returns where it is, instead
// of writing a second one.
func TestPublishDeadLetterRetriedAfterItsRecordWritesNoSecond(t *testing.T) {
	pool := testenv.Postgres(t)
	pub := &fakePublisher{at: contract.DLQCoordinates{Topic: "dlq", Partition: 1, Offset: 7}}
	acts := &activities.Activities{Publisher: pub, Heads: parking.NewStore(pool)}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&loseFirstCompletion{}}})
	env.RegisterActivityWithOptions(acts.PublishDeadLetter, activity.RegisterOptions{Name: contract.PublishDeadLetterActivity})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in contract.DeadLetterInput) (contract.DLQCoordinates, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3}})
		var at contract.DLQCoordinates
		err := workflow.ExecuteActivity(ctx, contract.PublishDeadLetterActivity, in).Get(ctx, &at)
		return at, err
	}, workflow.RegisterOptions{Name: "deadLetterOnce"})
	env.ExecuteWorkflow("deadLetterOnce", deadLetterInput())
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var at contract.DLQCoordinates
	require.NoError(t, env.GetWorkflowResult(&at))
	require.Equal(t, pub.at, at, "the first attempt's record")
	require.Len(t, pub.records, 1, "one record, though the activity ran twice")
}
