package app

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/starter"
	"github.com/causet/projection-retry/worker"
)

// DLQProducer returns the producer of CAUSET_DLQ_TOPIC (the configured
// brokers, TLS and SASL; acks from all in-sync replicas), built on first use
// and closed by Close.
func (s *Service) DLQProducer() (*kgo.Client, error) {
	if s.dlq != nil {
		return s.dlq, nil
	}
	cl, err := NewKafkaClient(s.Config,
		kgo.DefaultProduceTopic(s.Config.DLQTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(starter.KafkaLogger(s.Logger)),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	s.dlq = cl
	s.closers = append(s.closers, cl.Close)
	return cl, nil
}

// NewWorker builds the Temporal worker on CAUSET_TASK_QUEUE with the retry
// and lane workflows and the activities registered (package worker): the
// activities apply with Engine, publish dead letters with the DLQ producer
// and count on Registry. Run it with Run or Start.
func (s *Service) NewWorker() (sdkworker.Worker, error) {
	if s.Temporal == nil || s.Engine == nil {
		return nil, errWritePathOnly
	}
	producer, err := s.DLQProducer()
	if err != nil {
		return nil, err
	}
	return worker.New(worker.Options{
		Client:    s.Temporal.Client,
		TaskQueue: s.Config.TaskQueue,
		Activities: &activities.Activities{
			Applier:   s.Engine,
			Publisher: &dlq.Publisher{Client: producer, Topic: s.Config.DLQTopic},
			Logger:    s.Logger,
			Metrics:   activities.NewMetrics(s.Registry),
		},
	})
}

// BridgeOptions are the bridge's options: those of the configuration
// (starter.OptionsFromConfig), the engine, Temporal as starter and lane
// client, the blocked keys in PostgreSQL, the outage probes (a pool ping for
// PostgreSQL, the frontend's health check for Temporal), the logger, the
// registry, and the Kafka TLS and SASL with the client's metrics.
func (s *Service) BridgeOptions() (starter.Options, error) {
	if s.Temporal == nil || s.Engine == nil {
		return starter.Options{}, errWritePathOnly
	}
	opts := starter.OptionsFromConfig(s.Config)
	opts.Engine = s.Engine
	opts.Starter = s.Temporal.Client
	opts.Lanes = s.Temporal.Client
	opts.Blocks = starter.NewPostgresBlockStore(s.Pool)
	opts.Probe = s.Pool.Ping
	opts.TemporalProbe = s.Temporal.Probe
	opts.Logger = s.Logger
	opts.Registerer = s.Registry
	sec, err := KafkaSecurityOpts(s.Config.KafkaSecurity)
	if err != nil {
		return starter.Options{}, err
	}
	opts.KafkaOptions = append(sec, kgo.WithHooks(kprom.NewMetrics("causet_bridge_kafka", kprom.Registerer(s.Registry))))
	return opts, nil
}

// NewBridge builds the Kafka bridge with BridgeOptions. Run it with Run.
func (s *Service) NewBridge() (*starter.Bridge, error) {
	opts, err := s.BridgeOptions()
	if err != nil {
		return nil, err
	}
	return starter.New(opts)
}

// ServeMetrics serves Registry as /metrics on CAUSET_METRICS_ADDR until
// the returned stop (the free ServeMetrics).
func (s *Service) ServeMetrics() (stop func(), err error) {
	return ServeMetrics(s.Config.MetricsAddr, s.Registry, s.Logger)
}
