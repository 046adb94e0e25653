package activities_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
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
	at := deadLetterOnce(t, acts, &loseFirstCompletion{})
	require.Equal(t, pub.at, at, "the first attempt's record")
	require.Len(t, pub.records, 1, "one record, though the activity ran twice")
}

// diesAfterWriting writes the first record and then fails, as a worker that
// died (or lost its database) between writing a dead letter and
// remembering it does; later attempts publish as usual.
type diesAfterWriting struct {
	*dlq.Publisher
	calls atomic.Int32
}

func (p *diesAfterWriting) Publish(ctx context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error) {
	at, err := p.Publisher.Publish(ctx, key, r)
	if err == nil && p.calls.Add(1) == 1 {
		return contract.DLQCoordinates{}, errors.New("the worker died before remembering its dead letter")
	}
	return at, err
}

// A PublishDeadLetter whose record reached the topic but was not
// remembered is retried: the retry finds its record on the topic, remembers
// it and returns where it is, and writes no second one.
func TestPublishDeadLetterRetriedAfterItsRecordWasNotRememberedWritesNoSecond(t *testing.T) {
	pool := testenv.Postgres(t)
	onTopic, topic := dlqPublisher(t)
	pub := &diesAfterWriting{Publisher: onTopic}
	// The dead attempt's claim lasts 2 s here: the retry waits it out.
	acts := &activities.Activities{Publisher: pub, Heads: parking.NewStore(pool), DeadLetterFence: 2 * time.Second}
	at := deadLetterOnce(t, acts)
	require.EqualValues(t, 1, pub.calls.Load(), "the retry found the record: it published nothing")

	only := onlyRecord(t, onTopic, topic)
	require.Equal(t, contract.DLQCoordinates{Topic: topic, Partition: only.Partition, Offset: only.Offset}, at, "the first attempt's record")
	again, done, err := acts.Heads.PublishedDeadLetter(context.Background(), only.Record.Workflow.ID, only.Record.Workflow.RunID, 1)
	require.NoError(t, err)
	require.True(t, done, "remembered once found")
	require.Equal(t, at, again)
}

// writesLate hands its first record to the broker only after the attempt
// that published it has failed, as a produce whose request outlives its
// attempt does (a link that drops what the broker sends back, a worker
// stopped mid-publish); later records are written as usual.
type writesLate struct {
	*dlq.Publisher
	calls atomic.Int32
	late  chan error
}

func (p *writesLate) Publish(ctx context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error) {
	if p.calls.Add(1) > 1 {
		return p.Publisher.Publish(ctx, key, r)
	}
	go func() {
		time.Sleep(time.Second)
		_, err := p.Publisher.Publish(context.Background(), key, r)
		p.late <- err
	}()
	return contract.DLQCoordinates{}, errors.New("the produce outlived its attempt")
}

// A PublishDeadLetter attempt that failed while its record was still on its
// way to the broker is retried: the retry waits out the first attempt's
// claim, finds the record that landed after the attempt ended, and writes
// no second one. Without the claim the retry looks at once, finds nothing
// and writes its own.
func TestPublishDeadLetterRetryWaitsOutAWriteStillInFlight(t *testing.T) {
	pool := testenv.Postgres(t)
	onTopic, topic := dlqPublisher(t)
	pub := &writesLate{Publisher: onTopic, late: make(chan error, 1)}
	acts := &activities.Activities{Publisher: pub, Heads: parking.NewStore(pool), DeadLetterFence: 3 * time.Second}
	at := deadLetterOnce(t, acts)
	require.NoError(t, <-pub.late, "the first attempt's record was written, late")
	require.EqualValues(t, 1, pub.calls.Load(), "the retry found the late record: it published nothing")

	only := onlyRecord(t, onTopic, topic)
	require.Equal(t, contract.DLQCoordinates{Topic: topic, Partition: only.Partition, Offset: only.Offset}, at, "the late record")
}

// failsFirst refuses its first record, as a broker that is down does, and
// writes the later ones.
type failsFirst struct {
	*dlq.Publisher
	calls atomic.Int32
}

func (p *failsFirst) Publish(ctx context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error) {
	if p.calls.Add(1) == 1 {
		return contract.DLQCoordinates{}, errors.New("broker unavailable")
	}
	return p.Publisher.Publish(ctx, key, r)
}

// An attempt whose produce failed shortens its claim to the settle time:
// its retry writes once that has passed, not after the whole fence, and
// writes one record.
func TestPublishDeadLetterRetryAfterAFailedProduceWaitsOnlyTheSettleTime(t *testing.T) {
	pool := testenv.Postgres(t)
	onTopic, topic := dlqPublisher(t)
	pub := &failsFirst{Publisher: onTopic}
	acts := &activities.Activities{Publisher: pub, Heads: parking.NewStore(pool),
		DeadLetterFence: 10 * time.Minute, DeadLetterSettle: time.Second}
	// deadLetterOnce allows 3 attempts and its attempts a minute: a retry
	// held for the fence would fail it.
	at := deadLetterOnce(t, acts)
	require.EqualValues(t, 2, pub.calls.Load(), "the retry wrote the record")

	only := onlyRecord(t, onTopic, topic)
	require.Equal(t, contract.DLQCoordinates{Topic: topic, Partition: only.Partition, Offset: only.Offset}, at)
}

// dlqPublisher is a publisher on a DLQ topic of the test's own (3
// partitions) that reads it back for Find.
func dlqPublisher(t *testing.T) (*dlq.Publisher, string) {
	t.Helper()
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, "causet.projection-dlq.v1")
	testenv.CreateTopic(t, brokers, topic, 3)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	return &dlq.Publisher{Client: producer, Topic: topic, Reader: &dlq.ReaderOptions{Brokers: brokers}}, topic
}

// onlyRecord reads topic and requires exactly one record on it.
func onlyRecord(t *testing.T, pub *dlq.Publisher, topic string) dlq.Item {
	t.Helper()
	rd, err := dlq.NewReader(context.Background(), dlq.ReaderOptions{Brokers: pub.Reader.Brokers, Topic: topic})
	require.NoError(t, err)
	defer rd.Close()
	var items []dlq.Item
	require.NoError(t, rd.Read(context.Background(), func(it dlq.Item) error { items = append(items, it); return nil }))
	require.Len(t, items, 1, "one record on the topic")
	return items[0]
}

// deadLetterOnce runs acts.PublishDeadLetter from a workflow, with up to 3
// attempts a second apart and the interceptors given, and returns where the
// record is.
func deadLetterOnce(t *testing.T, acts *activities.Activities, interceptors ...interceptor.WorkerInterceptor) contract.DLQCoordinates {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// A retry may wait out an earlier attempt's claim in real time.
	env.SetTestTimeout(time.Minute)
	env.SetWorkerOptions(sdkworker.Options{Interceptors: interceptors})
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
	return at
}
