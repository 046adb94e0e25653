package starter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/backoff"
	"github.com/causet/projection-retry/parking"
)

// DefaultMaxPollRecords is the default batch bound: a partition's batch is
// one transaction, and bigger ones amortize its round trips and commit
// (3000 drained a backlog ~20 % faster than 1000; 5000 no faster).
const DefaultMaxPollRecords = 3000

// Options configure a Bridge.
type Options struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topic is the events topic. Optional, defaults to "causet.events.v1".
	Topic string
	// Group is the consumer group. Optional, defaults to "causet-projection-worker".
	Group string
	// DLQTopic receives poison records. Optional, defaults to "causet.projection-dlq.v1".
	DLQTopic string
	// TaskQueue is where retry workflows are started. Optional, defaults to "causet-projections".
	TaskQueue string
	// Mode is where attempt 1 runs. Optional, defaults to config.ModeInline.
	Mode config.Mode
	// Retry is the retry schedule carried by every workflow started. Optional,
	// defaults to config.DefaultRetry().
	Retry config.Retry
	// ReplayWindow is how long a dead-lettered workflow waits for replay.
	// Optional, defaults to 168h.
	ReplayWindow time.Duration
	// MaxInflight bounds the workflow starts in flight; at the bound the
	// partitions that want more wait and their fetching pauses. Optional,
	// defaults to 256.
	MaxInflight int

	// Ordering is what happens to later events of a (projection, fork,
	// entity) whose event is retrying: config.OrderingEntity parks them in
	// PostgreSQL behind it and releases them in order once it settles (in
	// workflow mode, where every event runs in Temporal, a key is held while
	// any of its events is there), config.OrderingNone applies or hands them
	// off at once. Optional, defaults to config.OrderingEntity.
	Ordering config.Ordering
	// Parking keeps blocked keys and their parked events. Required with
	// OrderingEntity.
	Parking *parking.Store
	// Workflows describes the retry workflows that blocked keys wait behind,
	// for a head whose settling was never recorded (terminated, or of an
	// earlier release). Optional, defaults to Starter when it is a
	// contract.Describer (a Temporal client.Client is).
	Workflows contract.Describer
	// MaxParkedPerKey and MaxParkedPerPartition bound the parked events of
	// one key and of one partition (CAUSET_PARKED_MAX_PER_KEY,
	// CAUSET_PARKED_MAX_PER_PARTITION): at a bound the partition waits for
	// releases before its next batch (backpressure, never a drop). Optional,
	// default to config.DefaultParkedMaxPerKey and
	// config.DefaultParkedMaxPerPartition.
	MaxParkedPerKey, MaxParkedPerPartition int64

	// Engine applies attempt 1 (inline mode) and lists the projections of an
	// event type. Required.
	Engine Engine
	// Starter starts workflows; a Temporal client.Client. Required.
	Starter WorkflowStarter

	// Logger receives JSON-friendly structured logs. Optional, defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the bridge's metrics. Optional, defaults to none
	// (metrics are counted but not registered).
	Registerer prometheus.Registerer

	// MaxPollRecords bounds one poll and so one partition batch. Optional,
	// defaults to DefaultMaxPollRecords.
	MaxPollRecords int
	// CommitInterval is how often completed offsets are committed. Optional,
	// defaults to 1s.
	CommitInterval time.Duration
	// MinBackoff and MaxBackoff bound the capped exponential backoff used to
	// retry a start while Temporal is unavailable, a batch while the database
	// is unreachable and a dead letter while Kafka refuses it. Optional,
	// default to 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// StartTimeout bounds one workflow start call. Optional, defaults to 10s.
	StartTimeout time.Duration
	// headStaleAfter, when set, replaces how long a retry head stays active
	// before it is described (heads.go): tests end heads from outside
	// without waiting for their schedule.
	headStaleAfter time.Duration
	// ProbeTimeout bounds one probe (Probe, TemporalProbe): a dependency
	// that does not answer a trivial request within it is out. Optional,
	// defaults to 5s.
	ProbeTimeout time.Duration
	// DatabaseTryTimeout bounds one database try of a partition (a batch's
	// transaction, a release, a key's head): past it the try is taken to
	// wait on a connection that will never answer, and it is retried on a
	// new one. It must exceed the server's statement_timeout, which ends a
	// statement that is merely slow first. Optional, defaults to
	// DefaultDatabaseTryTimeout.
	DatabaseTryTimeout time.Duration
	// MaxBufferedBytes pauses a partition's fetching once the record values
	// and keys queued for it reach this many bytes, as well as at 4 ×
	// MaxPollRecords records. Optional, defaults to
	// config.DefaultBridgeMaxBufferedBytes (CAUSET_BRIDGE_MAX_BUFFERED_BYTES).
	MaxBufferedBytes int64
	// InstanceID makes the bridge a static member of the group (KIP-345,
	// CAUSET_BRIDGE_INSTANCE_ID): a bridge restarted within SessionTimeout
	// gets its partitions back without a rebalance. Optional, defaults to
	// dynamic membership.
	InstanceID string
	// SessionTimeout is how long the group waits for a silent member (a
	// killed bridge) before giving its partitions to others. Optional,
	// defaults to 15s (franz-go's default is 45s).
	SessionTimeout time.Duration
	// Probe answers whether the database is reachable (a trivial query). A
	// batch that fails as a whole is an outage only if Probe fails too;
	// otherwise its events are isolated and each fails or applies on its
	// own. Optional: without it every batch-level error counts as an outage.
	Probe func(ctx context.Context) error
	// TemporalProbe answers whether Temporal is reachable (a health check).
	// A start that fails while Temporal answers is retried
	// maxHealthyStartFailures times, then the event is dead-lettered.
	// Optional: without it every failed start counts as an outage.
	TemporalProbe func(ctx context.Context) error
	// KafkaOptions are added to the Kafka client's options (TLS, SASL, kprom
	// hooks, ...). Optional.
	KafkaOptions []kgo.Opt

	// HoldEntity (CAUSET_DLQ_HOLD_ENTITY, entity ordering): a dead-lettered
	// head keeps its key's later events parked until it is replayed
	// successfully, discarded or its replay window ends, so a replay never
	// applies an older event after newer ones. Optional, defaults to false:
	// a dead letter lets its key go on.
	HoldEntity bool

	// Incidents is the detection of systemic failures (incidents.go).
	// Optional: a zero Threshold detects none.
	Incidents config.Incidents
	// IncidentStore records holding incidents. Required with policy hold.
	IncidentStore *incident.Store
	// IncidentClient starts and signals incident workflows. Optional,
	// defaults to Starter when it is an IncidentClient (a Temporal
	// client.Client is); required with a Threshold.
	IncidentClient incident.Client
}

// OptionsFromConfig fills the Kafka/Temporal names and retry settings from
// the process configuration; the caller adds Engine, Starter, Logger and
// Registerer.
func OptionsFromConfig(c config.Config) Options {
	return Options{
		Brokers:      c.KafkaBrokers,
		Topic:        c.EventsTopic,
		Group:        c.ConsumerGroup,
		DLQTopic:     c.DLQTopic,
		TaskQueue:    c.TaskQueue,
		Mode:         c.BridgeMode,
		Retry:        c.Retry,
		ReplayWindow: c.DLQReplayWindow,
		MaxInflight:  c.BridgeMaxInflight,
		Ordering:     c.Ordering,

		MaxBufferedBytes: c.BridgeMaxBufferedBytes,
		InstanceID:       c.BridgeInstanceID,
		Incidents:        c.Incidents,
		HoldEntity:       c.DLQHoldEntity,

		MaxParkedPerKey:       c.ParkedMaxPerKey,
		MaxParkedPerPartition: c.ParkedMaxPerPartition,
	}
}

func (o *Options) setDefaults() {
	if o.Topic == "" {
		o.Topic = config.DefaultEventsTopic
	}
	if o.Group == "" {
		o.Group = config.DefaultConsumerGroup
	}
	if o.DLQTopic == "" {
		o.DLQTopic = config.DefaultDLQTopic
	}
	if o.TaskQueue == "" {
		o.TaskQueue = config.DefaultTaskQueue
	}
	if o.Mode == "" {
		o.Mode = config.ModeInline
	}
	if o.Ordering == "" {
		o.Ordering = config.OrderingEntity
	}
	if o.Workflows == nil {
		if d, ok := o.Starter.(contract.Describer); ok {
			o.Workflows = d
		}
	}
	if o.Retry == (config.Retry{}) {
		o.Retry = config.DefaultRetry()
	}
	if o.ReplayWindow == 0 {
		o.ReplayWindow = config.DefaultReplayWindow
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = config.DefaultMaxInflight
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxPollRecords == 0 {
		o.MaxPollRecords = DefaultMaxPollRecords
	}
	if o.CommitInterval == 0 {
		o.CommitInterval = time.Second
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = backoff.DefaultMin
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = backoff.DefaultMax
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = defaultProbeTimeout
	}
	if o.DatabaseTryTimeout == 0 {
		o.DatabaseTryTimeout = DefaultDatabaseTryTimeout
	}
	if o.MaxBufferedBytes == 0 {
		o.MaxBufferedBytes = config.DefaultBridgeMaxBufferedBytes
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 15 * time.Second
	}
	if o.MaxParkedPerKey == 0 {
		o.MaxParkedPerKey = config.DefaultParkedMaxPerKey
	}
	if o.MaxParkedPerPartition == 0 {
		o.MaxParkedPerPartition = config.DefaultParkedMaxPerPartition
	}
}

// validate returns one clear error for the first invalid option.
func (o *Options) validate() error {
	switch {
	case len(o.Brokers) == 0:
		return errors.New("starter: Options.Brokers is required")
	case o.Engine == nil:
		return errors.New("starter: Options.Engine is required")
	case o.Starter == nil:
		return errors.New("starter: Options.Starter is required (a Temporal client)")
	case o.Mode != config.ModeInline && o.Mode != config.ModeWorkflow:
		return fmt.Errorf("starter: Options.Mode %q is invalid: want %q or %q", o.Mode, config.ModeInline, config.ModeWorkflow)
	case o.Topic == o.DLQTopic:
		return fmt.Errorf("starter: Options.Topic and DLQTopic are both %q: the bridge would consume its own dead letters", o.Topic)
	case o.MaxInflight < 1:
		return fmt.Errorf("starter: Options.MaxInflight %d is invalid: want at least 1", o.MaxInflight)
	case o.MaxPollRecords < 1:
		return fmt.Errorf("starter: Options.MaxPollRecords %d is invalid: want at least 1", o.MaxPollRecords)
	case o.ReplayWindow < 0:
		return fmt.Errorf("starter: Options.ReplayWindow %s is invalid: want a positive duration", o.ReplayWindow)
	case o.MaxBufferedBytes < 1 || o.MaxParkedPerKey < 1 || o.MaxParkedPerPartition < 1:
		return errors.New("starter: Options.MaxBufferedBytes, MaxParkedPerKey and MaxParkedPerPartition must be positive")
	case o.SessionTimeout < 6*time.Second:
		return fmt.Errorf("starter: Options.SessionTimeout %s is invalid: want at least 6s (Kafka's group.min.session.timeout.ms)", o.SessionTimeout)
	case o.CommitInterval < 0 || o.MinBackoff < 0 || o.MaxBackoff < o.MinBackoff || o.StartTimeout < 0:
		return errors.New("starter: Options.CommitInterval, MinBackoff, MaxBackoff and StartTimeout must be positive with MinBackoff <= MaxBackoff")
	}
	if o.IncidentClient == nil {
		if ic, ok := o.Starter.(incident.Client); ok {
			o.IncidentClient = ic
		}
	}
	if o.Incidents.Threshold > 0 {
		switch {
		case o.IncidentClient == nil:
			return errors.New("starter: Options.IncidentClient is required to detect incidents (a Temporal client)")
		case o.Incidents.Policy == config.IncidentHold && (o.IncidentStore == nil || !o.ordered() || o.Mode != config.ModeInline):
			return errors.New("starter: CAUSET_INCIDENT_POLICY=hold needs Options.IncidentStore, entity ordering and inline mode")
		}
	}
	if o.Ordering != config.OrderingEntity && o.Ordering != config.OrderingNone {
		return fmt.Errorf("starter: Options.Ordering %q is invalid: want %q or %q", o.Ordering, config.OrderingEntity, config.OrderingNone)
	}
	if o.ordered() {
		switch {
		case o.Parking == nil:
			return errors.New("starter: Options.Parking is required with Ordering entity (parking.NewStore)")
		case o.Workflows == nil:
			return errors.New("starter: Options.Workflows is required with Ordering entity (a Temporal client)")
		}
	}
	if err := o.Retry.Validate(); err != nil {
		return fmt.Errorf("starter: Options.Retry: %w", err)
	}
	return nil
}

// ordered reports whether later events of a retrying key are parked behind it.
func (o *Options) ordered() bool {
	return o.Ordering == config.OrderingEntity
}
