package app

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/causet/projection-retry/activities"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/dialer"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/parking"
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
	// Dead letters carry the trace of the activity that publishes them.
	cl, err := NewKafkaClient(s.Config, append([]kgo.Opt{
		kgo.DefaultProduceTopic(s.Config.DLQTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// A dead letter not written within its window is failed, even
		// when its request is in flight, so that the next attempt, which
		// waits out the window (DeadLetterFence), is the only writer.
		kgo.RecordDeliveryTimeout(dlq.WriteWindow),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.WithLogger(starter.KafkaLogger(s.Logger)),
	}, s.tracing.KafkaOpts("")...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	s.dlq = cl
	s.closers = append(s.closers, cl.Close)
	return cl, nil
}

// NewWorker builds the Temporal worker on CAUSET_TASK_QUEUE with the retry
// and incident workflows and the activities registered (package worker), as
// the Worker Deployment Version of CAUSET_WORKER_DEPLOYMENT and
// CAUSET_WORKER_BUILD_ID when they are set: the
// activities apply with Engine, publish dead letters with the DLQ producer
// and count on Registry. Run it with Run or Start. Until Close, the open
// dead letters are scanned every minute for their gauges
// (worker.DeadLetterMonitor).
func (s *Service) NewWorker() (sdkworker.Worker, error) {
	if s.Temporal == nil || s.Engine == nil {
		return nil, errWritePathOnly
	}
	producer, err := s.DLQProducer()
	if err != nil {
		return nil, err
	}
	readOpts, err := KafkaConnOpts(s.Config.KafkaSecurity, s.Config.LinkTimeout)
	if err != nil {
		return nil, err
	}
	acts := &activities.Activities{
		Applier: s.Engine,
		Publisher: &dlq.Publisher{Client: producer, Topic: s.Config.DLQTopic,
			ConsumerGroup: s.Config.ConsumerGroup, Reader: &dlq.ReaderOptions{Brokers: s.Config.KafkaBrokers, ClientOpts: readOpts}},
		Logger:  s.Logger,
		Metrics: activities.NewMetrics(s.Registry),
		Heads:   parking.NewStore(s.Pool),
		// Under entity ordering no attempt may apply an event its entity
		// has moved past; under none only replays are checked.
		GuardEveryRun: s.Config.Ordering == config.OrderingEntity,
		// An attempt that cannot reach the database while a new connection
		// cannot either is an outage: it counts as none.
		ProbeDatabase:    ProbePostgres(s.Pool),
		DeadLetterFence:  DeadLetterFence(s.Config.LinkTimeout),
		DeadLetterSettle: DeadLetterSettle(s.Config.LinkTimeout),
	}
	if s.Config.Incidents.Policy == config.IncidentHold {
		// A run whose failure a holding incident has waits with it.
		acts.Holds = incident.NewStore(s.Pool)
	}
	runner, err := s.RolloutRunner()
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Options{
		Rollouts:   &activities.Rollouts{Runner: runner},
		Client:     s.Temporal.Client,
		TaskQueue:  s.Config.TaskQueue,
		Activities: acts,
		Incidents:  &activities.Incidents{Prober: s.Engine, Store: incident.NewStore(s.Pool), Client: s.Temporal.Client, Logger: s.Logger},
		Version: sdkworker.WorkerDeploymentVersion{
			DeploymentName: s.Config.WorkerVersioning.DeploymentName,
			BuildID:        s.Config.WorkerVersioning.BuildID,
		},
	})
	if err != nil {
		return nil, err
	}
	mon, err := worker.NewDeadLetterMonitor(worker.DeadLetterMonitorOptions{
		Client: s.Temporal.Client, Namespace: s.Temporal.Namespace, TaskQueue: s.Config.TaskQueue,
		Registerer: s.Registry, Logger: s.Logger, DataConverter: s.Temporal.DataConverter,
	})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, mon.Start())
	return w, nil
}

// BridgeOptions are the bridge's options: those of the configuration
// (starter.OptionsFromConfig), the engine, Temporal as starter, incident
// client and head describer, the blocked keys in PostgreSQL, the outage probes (a pool ping for
// PostgreSQL, the frontend's health check for Temporal), the logger, the
// registry, and the Kafka TLS and SASL with the client's metrics. From the
// first call on, /readyz also waits for the bridge built with them to be a
// member of its consumer group (check "kafka").
func (s *Service) BridgeOptions() (starter.Options, error) {
	if s.Temporal == nil || s.Engine == nil {
		return starter.Options{}, errWritePathOnly
	}
	opts := starter.OptionsFromConfig(s.Config)
	opts.Engine = s.Engine
	opts.Starter = s.Temporal.Client
	opts.Workflows = s.Temporal.Client
	opts.Parking = parking.NewStore(s.Pool)
	opts.IncidentStore = incident.NewStore(s.Pool)
	opts.Probe = ProbePostgres(s.Pool)
	opts.DatabaseTryTimeout = DatabaseTryTimeout(s.Pool)
	opts.TemporalProbe = s.Temporal.Probe
	opts.Logger = s.Logger
	opts.Registerer = s.Registry
	sec, err := KafkaConnOpts(s.Config.KafkaSecurity, s.Config.LinkTimeout)
	if err != nil {
		return starter.Options{}, err
	}
	if s.group == nil {
		s.group = &groupMembership{group: opts.Group}
		s.health.Add(health.Check{Name: "kafka", Probe: s.group.check})
	}
	opts.KafkaOptions = append(sec, kgo.WithHooks(kprom.NewMetrics("causet_bridge_kafka", kprom.Registerer(s.Registry)), s.group))
	// Fetched records carry their trace in Context, which the bridge's hand-off spans continue.
	opts.KafkaOptions = append(opts.KafkaOptions, s.tracing.KafkaOpts(opts.Group)...)
	return opts, nil
}

// NewBridge builds the Kafka bridge with BridgeOptions, and makes /healthz
// fail while it is stuck (WatchBridge). Run it with Run.
func (s *Service) NewBridge() (*starter.Bridge, error) {
	opts, err := s.BridgeOptions()
	if err != nil {
		return nil, err
	}
	b, err := starter.New(opts)
	if err != nil {
		return nil, err
	}
	s.WatchBridge(b)
	return b, nil
}

// WatchBridge makes /healthz fail while a partition of b with work has made
// no progress for starter.StallAfter, so that an orchestrator restarts a
// process stuck in a call nothing ends.
func (s *Service) WatchBridge(b *starter.Bridge) {
	s.health.AddLive(health.Live{Name: "bridge", Check: func() error { return b.Stalled(starter.StallAfter) }})
}

// ServeMetrics serves Registry as /metrics, with /healthz and /readyz
// (Health), on CAUSET_METRICS_ADDR until the returned stop.
func (s *Service) ServeMetrics() (stop func(), err error) {
	return serveMetrics(s.Config.MetricsAddr, s.Registry, s.Logger, s.health)
}

// Health is the service's /healthz and /readyz: PostgreSQL, Temporal unless
// opened WithWritePathOnly, and the bridge's consumer group once
// BridgeOptions (or NewBridge) was called.
func (s *Service) Health() *health.Health { return s.health }

// kafkaRequestOverhead is franz-go's default RequestTimeoutOverhead: how
// long a connection's handshake request, or a request's write, may take.
const kafkaRequestOverhead = 10 * time.Second

// DeadLetterFence is how long a PublishDeadLetter attempt may still cause
// its record to be written after the attempt began: the producer's window
// (dlq.WriteWindow), then a connection's dial and handshake and the write
// of the request, then the TCP user timeout (linkTimeout) within which the
// kernel delivers what was written or drops the connection; and 30 s of
// room for clocks and scheduling.
func DeadLetterFence(linkTimeout time.Duration) time.Duration {
	if linkTimeout <= 0 {
		linkTimeout = dialer.DefaultLinkTimeout
	}
	return dlq.WriteWindow + dialer.ConnectTimeout + 2*kafkaRequestOverhead + linkTimeout + 30*time.Second
}

// DeadLetterSettle is how long a PublishDeadLetter attempt whose produce
// failed may still cause its record to be written: a request already
// handed to the connection (its write deadline), then the TCP user timeout
// (linkTimeout); and 10 s of room.
func DeadLetterSettle(linkTimeout time.Duration) time.Duration {
	if linkTimeout <= 0 {
		linkTimeout = dialer.DefaultLinkTimeout
	}
	return kafkaRequestOverhead + linkTimeout + 10*time.Second
}
