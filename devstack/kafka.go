package devstack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/internal/backoff"
	"github.com/causet/projection-retry/internal/proc"
)

// DefaultKafkaPort is the port the in-process cluster uses when free and
// KafkaOptions.DefaultPort is set (KAFKA_BROKERS' default, 127.0.0.1:9092).
const DefaultKafkaPort = 9092

// KafkaOptions configure StartKafka.
type KafkaOptions struct {
	// Topics are created with Partitions partitions. Optional.
	Topics []string
	// Partitions per topic. Optional, defaults to 3.
	Partitions int32
	// DefaultPort makes the cluster listen on 127.0.0.1:9092 when it is free,
	// so tools using KAFKA_BROKERS' default reach it. Optional, defaults to
	// false: a free port.
	DefaultPort bool
}

// Kafka is an in-process single-broker kfake cluster. Stop it with Stop.
type Kafka struct {
	// Brokers are the seed addresses.
	Brokers []string
	c       *kfake.Cluster
}

// StartKafka starts an in-process kfake cluster on 127.0.0.1 with opts.Topics
// created. Topics not listed are auto-created on first use.
func StartKafka(opts KafkaOptions) (*Kafka, error) {
	if opts.Partitions <= 0 {
		opts.Partitions = 3
	}
	port := 0
	if opts.DefaultPort && proc.PortFree(DefaultKafkaPort) {
		port = DefaultKafkaPort
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(opts.Partitions)),
	}
	if len(opts.Topics) > 0 {
		kopts = append(kopts, kfake.SeedTopics(opts.Partitions, opts.Topics...))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil && port != 0 { // 9092 taken between the probe and the bind
		kopts[1] = kfake.Ports(0)
		c, err = kfake.NewCluster(kopts...)
	}
	if err != nil {
		return nil, fmt.Errorf("start in-process kafka (kfake): %w", err)
	}
	return &Kafka{Brokers: c.ListenAddrs(), c: c}, nil
}

// Stop closes the cluster. It is idempotent.
func (k *Kafka) Stop() {
	if k != nil && k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// EnsureTopics creates topics with partitions partitions (replication factor
// 1) on brokers, leaving existing topics alone, and waits until they are
// listed with a leader for every partition.
func EnsureTopics(ctx context.Context, brokers []string, partitions int32, topics ...string) error {
	return EnsureTopicsWith(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, partitions, topics...)
}

// EnsureTopicsWith is EnsureTopics with a client made of opts (the seed
// brokers and, for a secured broker, its TLS and SASL).
func EnsureTopicsWith(ctx context.Context, opts []kgo.Opt, partitions int32, topics ...string) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resps, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create topics %v at %v: %w", topics, cl.OptValue(kgo.SeedBrokers), err)
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	for {
		td, err := adm.ListTopics(ctx, topics...)
		if err == nil && ready(td, topics) {
			return nil
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("topics %v not ready after 60s (last error %v)", topics, err)
		}
	}
}

func ready(td kadm.TopicDetails, topics []string) bool {
	for _, t := range topics {
		d, ok := td[t]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}
