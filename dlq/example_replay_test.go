package dlq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
)

// A Reader reads dead letters from the DLQ topic, filtered, and a Replayer
// sends each back through its retry schedule, as `causet dlq replay` does:
// it signals a run still open in dead_lettered, restarts one that closed and
// leaves alone one that succeeded or is retrying.
//
// Here Kafka is an in-process kfake cluster holding one dead letter, published
// as the worker's PublishDeadLetter publishes it, and a stand-in for the
// Temporal client knows its run, open in dead_lettered. With a real cluster,
// Brokers are KAFKA_BROKERS and Client is a go.temporal.io/sdk/client.Client.
func ExampleReplayer() {
	ctx := context.Background()
	topic := config.DefaultDLQTopic
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		panic(err)
	}
	defer kafka.Close()
	brokers := kafka.ListenAddrs()
	deadLetter := publishDeadLetter(ctx, brokers, topic)
	temporal := &standInTemporal{runs: map[string]contract.State{deadLetter.Workflow.ID: contract.StateDeadLettered}}

	reader, err := dlq.NewReader(ctx, dlq.ReaderOptions{
		Brokers: brokers,
		Topic:   topic,
		Filter:  dlq.Filter{Projection: "artist_followers", ErrorKind: "sql"},
	})
	if err != nil {
		panic(err)
	}
	defer reader.Close()
	replayer, err := dlq.NewReplayer(dlq.ReplayerOptions{
		Client:    temporal,
		TaskQueue: config.DefaultTaskQueue,
		Identity:  "ops@example",
		Reason:    "column followed_at added",
	})
	if err != nil {
		panic(err)
	}
	err = reader.Read(ctx, func(it dlq.Item) error {
		fmt.Printf("%s %s after %d attempts: %s\n", it.Record.ProjectionName, it.Record.EventType, it.Record.RetryCount, it.Record.Error)
		res, err := replayer.Replay(ctx, it)
		fmt.Println(res.Outcome, res.WorkflowID, "(was "+res.Before.String()+")")
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", replayer.Summary())
	fmt.Println("signals:", temporal.signals)
	// Output:
	// artist_followers ARTIST_FOLLOWED after 2 attempts: column "followed_at" of relation "artist_followers" does not exist
	// signalled projection-retry:artist_followers:main:intent-1%3A1 (was dead_lettered)
	// {Signalled:1 Restarted:0 AlreadySucceeded:0 Duplicates:0 Skipped:0 Refused:0 Failed:0 Unsettled:0}
	// signals: [replay projection-retry:artist_followers:main:intent-1%3A1 by ops@example: column followed_at added]
}

// publishDeadLetter publishes the dead letter of an event whose two
// attempts failed, as the worker's PublishDeadLetter does, and returns it.
func publishDeadLetter(ctx context.Context, brokers []string, topic string) dlq.Record {
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	failed := time.Now().Add(-time.Minute)
	cause := `column "followed_at" of relation "artist_followers" does not exist`
	rec := dlq.RunRecord(contract.DeadLetterInput{
		Event: event.Envelope{EventID: "intent-1:1", EventType: "ARTIST_FOLLOWED", EntityID: "user-1", ForkID: "main",
			Payload: json.RawMessage(`{"artistId":"artist-7"}`)},
		Key:        []byte("user-1"),
		Projection: "artist_followers",
		IRVersion:  1,
		Attempts: []contract.Attempt{
			{Number: 1, StartedAt: failed, ErrorKind: string(contract.KindSQL), Error: cause},
			{Number: 2, StartedAt: failed.Add(time.Second), ErrorKind: string(contract.KindSQL), Error: cause},
		},
		Source: contract.Source{Topic: config.DefaultEventsTopic, Partition: 0, Offset: 41},
	}, time.Now())
	rec.Workflow = &dlq.WorkflowRef{Namespace: "default", RunID: "run-1",
		ID: contract.RetryWorkflowID("artist_followers", "main", "intent-1:1")}
	if _, err := (&dlq.Publisher{Client: producer, Topic: topic}).Publish(ctx, []byte("user-1"), rec); err != nil {
		panic(err)
	}
	return rec
}

// standInTemporal answers the Replayer's three calls from a map of open runs
// and their CausetRetryState, and records the signals it gets.
type standInTemporal struct {
	runs    map[string]contract.State
	signals []string
}

func (t *standInTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	state, ok := t.runs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(string(state))
	if err != nil {
		return nil, err
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run-1"},
		Status:           enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{contract.AttrRetryState.GetName(): p}},
	}}, nil
}

func (t *standInTemporal) SignalWorkflow(_ context.Context, id, _, name string, arg any) error {
	sig := arg.(contract.ReplaySignal)
	t.signals = append(t.signals, fmt.Sprintf("%s %s by %s: %s", name, id, sig.Identity, sig.Reason))
	return nil
}

func (t *standInTemporal) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, serviceerror.NewInvalidArgument("the stand-in starts no workflows")
}
