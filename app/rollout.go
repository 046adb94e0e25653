package app

import (
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/rollout"
)

// RolloutRunner is what `causet projections check` and the rollout
// workflow's activities work with: the service's pool, engine and Temporal
// client, the DLQ topic read with the process's Kafka options, and the
// replay settings of CAUSET_TASK_QUEUE, the retry schedule, the replay
// window and the dedupe horizon.
func (s *Service) RolloutRunner() (*rollout.Runner, error) {
	if s.Temporal == nil || s.Engine == nil {
		return nil, errWritePathOnly
	}
	opts, err := KafkaConnOpts(s.Config.KafkaSecurity, s.Config.LinkTimeout)
	if err != nil {
		return nil, err
	}
	return &rollout.Runner{
		Sources: rollout.Sources{
			Pool: s.Pool, Temporal: s.Temporal.Client, Namespace: s.Temporal.Namespace, TaskQueue: s.Config.TaskQueue,
			DLQ:           &dlq.ReaderOptions{Brokers: s.Config.KafkaBrokers, Topic: s.Config.DLQTopic, ClientOpts: opts},
			DataConverter: s.Temporal.DataConverter,
		},
		Engine: s.Engine,
		Replay: dlq.ReplayerOptions{
			Client: s.Temporal.Client, TaskQueue: s.Config.TaskQueue, Retry: s.Config.Retry,
			ReplayWindow: s.Config.DLQReplayWindow, DedupeHorizon: s.Config.DedupeHorizon,
			Propagator: s.tracing.TextMapPropagator(),
		},
		Logger: s.Logger,
	}, nil
}
