package starter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/starter"
)

// A Bridge consumes the events topic, applies attempt 1 of every matched
// (projection, event) inline and starts a ProjectionRetryWorkflow for each
// that fails; Run returns once its context ends, with the finished offsets
// committed.
//
// `causet bridge` starts from OptionsFromConfig and adds (in
// app.Service.BridgeOptions) a *projection.Engine on PostgreSQL, the Temporal
// client as Starter, a parking.Store for CAUSET_ORDERING=entity (the
// default), the outage probes and Kafka's TLS and SASL. Here Kafka is an
// in-process kfake cluster, the engine a stand-in that fails events without
// an artistId, the Starter a stand-in that records the workflows it is asked
// to start, and with CAUSET_ORDERING=none nothing is parked, so no
// PostgreSQL is needed.
func ExampleBridge_Run() {
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(1, config.DefaultEventsTopic, config.DefaultDLQTopic))
	if err != nil {
		panic(err)
	}
	defer kafka.Close()
	produce(kafka.ListenAddrs(), `{"artistId":"artist-7"}`, `{}`, `{"artistId":"artist-9"}`)

	engine, temporal := &standInEngine{}, &standInTemporal{}
	bridge, err := starter.New(starter.Options{
		Brokers:  kafka.ListenAddrs(),
		Ordering: config.OrderingNone,
		Engine:   engine,
		Starter:  temporal,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- bridge.Run(ctx) }()
	for engine.count()+temporal.count() < 3 { // every event applied or handed off
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-ran; err != nil {
		panic(err)
	}
	fmt.Println("applied:", engine.applied)
	fmt.Println("started:", temporal.started)
	fmt.Println("committed offset:", committed(kafka.ListenAddrs()))
	// Output:
	// applied: [user-1/artist-7 user-3/artist-9]
	// started: [ProjectionRetryWorkflow projection-retry:artist_followers:main:e2 on causet-projections]
	// committed offset: 3
}

// produce writes one ARTIST_FOLLOWED event per payload, for user-1, user-2, …
func produce(brokers []string, payloads ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(config.DefaultEventsTopic))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	for i, p := range payloads {
		env := event.Envelope{EventID: fmt.Sprintf("e%d", i+1), EventType: "ARTIST_FOLLOWED",
			EntityID: fmt.Sprintf("user-%d", i+1), ForkID: "main", Payload: json.RawMessage(p)}
		value, err := json.Marshal(env)
		if err != nil {
			panic(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(env.EntityID), Value: value}).FirstErr(); err != nil {
			panic(err)
		}
	}
}

// standInEngine is the projection artist_followers kept in memory: it
// applies ARTIST_FOLLOWED, and fails an event without an artistId as the
// real engine's CEL would (ir_eval).
type standInEngine struct {
	mu      sync.Mutex
	applied []string
}

func (e *standInEngine) Projections(eventType string) []string {
	if eventType == "ARTIST_FOLLOWED" {
		return []string{"artist_followers"}
	}
	return nil
}

func (e *standInEngine) ApplyBatch(_ context.Context, evs []event.Envelope, _ ...projection.ApplyOptions) ([]projection.Result, error) {
	e.mu.Lock()
	var out []projection.Result
	for i, ev := range evs {
		r := projection.Result{Projection: "artist_followers", IRVersion: 1, Index: i, EventID: ev.EventID, Status: projection.StatusApplied}
		var p struct{ ArtistID string }
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.ArtistID == "" {
			r.Status = projection.StatusFailed
			r.Err = &projection.ApplyError{Kind: contract.KindIREval, Err: errors.New("no such key: artistId")}
		} else {
			e.applied = append(e.applied, ev.EntityID+"/"+p.ArtistID)
		}
		out = append(out, r)
	}
	e.mu.Unlock()
	return out, nil
}

func (e *standInEngine) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.applied)
}

// standInTemporal records the workflows it is asked to start.
type standInTemporal struct {
	mu      sync.Mutex
	started []string
}

func (t *standInTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, workflow any, _ ...any) (client.WorkflowRun, error) {
	t.mu.Lock()
	t.started = append(t.started, fmt.Sprintf("%v %s on %s", workflow, o.ID, o.TaskQueue))
	t.mu.Unlock()
	return nil, nil
}

func (t *standInTemporal) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.started)
}

// committed is the bridge's committed offset on the events topic's partition 0.
func committed(brokers []string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	offsets, err := kadm.NewClient(cl).FetchOffsets(context.Background(), config.DefaultConsumerGroup)
	if err != nil {
		panic(err)
	}
	o, _ := offsets.Lookup(config.DefaultEventsTopic, 0)
	return o.At
}
