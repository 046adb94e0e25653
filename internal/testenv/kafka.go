package testenv

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const kafkaHowTo = "start one with `scripts/kafka-broker.sh start` (or `make kafka-start`) and set KAFKA_BROKERS=127.0.0.1:9092"

// IsRealKafka reports whether KAFKA_BROKERS is set, i.e. tests run against a
// real broker instead of an in-process kfake cluster.
func IsRealKafka() bool {
	return strings.TrimSpace(os.Getenv("KAFKA_BROKERS")) != ""
}

// Kafka returns seed brokers for this test. With KAFKA_BROKERS set these are
// the real broker's (shared by all tests: use [Topic] for unique topic names);
// otherwise a fresh single-broker kfake cluster is started for this test and
// closed when it ends. Both auto-create topics on metadata requests (3
// partitions), but tests should create their topics with [CreateTopic].
//
// Name tests that call this with "Kafka" in them: `make test-kafka` runs the
// tests matching "Kafka" against a real broker.
func Kafka(t testing.TB) []string {
	t.Helper()
	if IsRealKafka() {
		var seeds []string
		for _, s := range strings.Split(os.Getenv("KAFKA_BROKERS"), ",") {
			if s = strings.TrimSpace(s); s != "" {
				seeds = append(seeds, s)
			}
		}
		pingKafka(t, seeds)
		return seeds
	}
	return newKfake(t).ListenAddrs()
}

// KafkaCluster starts a single-broker kfake cluster for fault-injection tests
// (Cluster.ControlKey etc.), closed when the test ends; its seeds are
// ListenAddrs(). Skips when KAFKA_BROKERS is set, since faults cannot be
// injected into a real broker.
func KafkaCluster(t testing.TB) *kfake.Cluster {
	t.Helper()
	if IsRealKafka() {
		t.Skip("testenv: KafkaCluster needs the in-process kfake cluster; KAFKA_BROKERS is set")
	}
	return newKfake(t)
}

func newKfake(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(3),
	)
	if err != nil {
		t.Fatalf("testenv: start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func pingKafka(t testing.TB, seeds []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatalf("testenv: KAFKA_BROKERS=%q: %v", os.Getenv("KAFKA_BROKERS"), err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		unavailable(t, "Kafka at KAFKA_BROKERS=%q is not reachable: %v\n%s", os.Getenv("KAFKA_BROKERS"), err, kafkaHowTo)
	}
}

// Topic returns a topic name unique to this test and process, starting with
// prefix (e.g. "causet.events.v1"), valid for Kafka (at most 249 characters of
// [a-zA-Z0-9._-]).
func Topic(t testing.TB, prefix string) string {
	return uniqueName(t, prefix, ".", 200)
}

// CreateTopic creates topic with the given number of partitions (replication
// factor 1) and waits until every partition has a leader. On a real broker
// the topic is deleted when the test ends.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int32) {
	t.Helper()
	CreateTopicWithConfig(t, brokers, topic, partitions, nil)
}

// CreateTopicWithConfig is CreateTopic with topic configs (e.g.
// "max.message.bytes"); nil configs are the broker's defaults.
func CreateTopicWithConfig(t testing.TB, brokers []string, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("testenv: create topic %s: %v", topic, err)
	}
	if IsRealKafka() {
		t.Cleanup(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				return
			}
			adm := kadm.NewClient(cl)
			defer adm.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, _ = adm.DeleteTopic(ctx, topic)
		})
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := td[topic]; ok && d.Err == nil && int32(len(d.Partitions)) == partitions && allLed(d) {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("testenv: topic %s has no leaders for all %d partitions after 60s (last error %v)", topic, partitions, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func allLed(d kadm.TopicDetail) bool {
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
