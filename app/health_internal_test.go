package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/internal/testenv"
)

// consume polls cl until the test ends, as the bridge does.
func consume(t *testing.T, cl *kgo.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if cl.PollFetches(ctx).IsClientClosed() {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestGroupMembershipKafka: the bridge's readiness check fails until its
// client is a member of the group, holds for a member with no partitions
// (more bridges than partitions), and fails again once the client closed.
func TestGroupMembershipKafka(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, group := testenv.Topic(t, "events"), testenv.Topic(t, "group")
	testenv.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(g *groupMembership) error {
		cctx, cancel := context.WithTimeout(ctx, health.DefaultTimeout)
		defer cancel()
		return g.check(cctx)
	}

	first := &groupMembership{group: group}
	require.ErrorContains(t, check(first), "is not running")
	cl1, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(first))
	require.NoError(t, err)
	defer cl1.Close()
	consume(t, cl1)
	require.Eventually(t, func() bool { return check(first) == nil }, 30*time.Second, 50*time.Millisecond, "first member: %v", check(first))

	second := &groupMembership{group: group}
	cl2, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(second))
	require.NoError(t, err)
	consume(t, cl2)
	require.Eventually(t, func() bool { return check(second) == nil }, 30*time.Second, 50*time.Millisecond, "second member: %v", check(second))
	require.Eventually(t, func() bool { return check(first) == nil }, 30*time.Second, 50*time.Millisecond, "first member after the rebalance: %v", check(first))

	cl2.Close()
	require.ErrorContains(t, check(second), "is not running")
}

// TestGroupMembershipUnreachableKafka: with no broker answering, the check
// says the group is not joined, within its timeout.
func TestGroupMembershipUnreachableKafka(t *testing.T) {
	g := &groupMembership{group: "causet-projection-worker"}
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup(g.group), kgo.ConsumeTopics("causet.events.v1"), kgo.WithHooks(g))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), health.DefaultTimeout)
	defer cancel()
	require.EqualError(t, g.check(ctx), `not yet joined consumer group "causet-projection-worker"`)
}
