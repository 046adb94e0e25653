package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/causet/projection-retry/internal/health"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// postgresCheck pings the pool; the error names the host and port, never
// the password.
func (s *Service) postgresCheck() health.Check {
	return health.Check{Name: "postgres", Probe: func(ctx context.Context) error {
		if err := s.Pool.Ping(ctx); err != nil {
			return errors.New(s.poolError(err))
		}
		return nil
	}}
}

// temporalCheck asks the frontend's health check, as the bridge's outage
// probe does.
func (s *Service) temporalCheck() health.Check {
	return health.Check{Name: "temporal", Probe: func(ctx context.Context) error {
		if err := s.Temporal.Probe(ctx); err != nil {
			return fmt.Errorf("Temporal at %s: %w", s.Temporal.HostPort, err)
		}
		return nil
	}}
}

// groupMembership follows the bridge's Kafka client (a kgo hook: the bridge
// sets its own OnPartitionsAssigned, which a second one would replace) and
// tells whether it is a member of its consumer group. A member with no
// partitions (more bridges than partitions) is a member all the same.
type groupMembership struct {
	group string
	cl    atomic.Pointer[kgo.Client]
}

func (g *groupMembership) OnNewClient(cl *kgo.Client) { g.cl.Store(cl) }

func (g *groupMembership) OnClientClosed(cl *kgo.Client) { g.cl.CompareAndSwap(cl, nil) }

var (
	_ kgo.HookNewClient    = (*groupMembership)(nil)
	_ kgo.HookClientClosed = (*groupMembership)(nil)
)

// check asks the group's coordinator: the client's own member ID and
// generation survive leaving the group, so only the member list proves the
// join.
func (g *groupMembership) check(ctx context.Context) error {
	cl := g.cl.Load()
	if cl == nil {
		return fmt.Errorf("the bridge's consumer of group %q is not running", g.group)
	}
	member, _ := cl.GroupMetadata()
	if member == "" {
		return fmt.Errorf("not yet joined consumer group %q", g.group)
	}
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, g.group)
	if err != nil {
		return fmt.Errorf("describe consumer group %q: %w", g.group, err)
	}
	d, ok := described[g.group]
	if !ok {
		return fmt.Errorf("describe consumer group %q: no answer for it", g.group)
	}
	if d.Err != nil {
		return fmt.Errorf("describe consumer group %q: %w", g.group, d.Err)
	}
	for _, m := range d.Members {
		if m.MemberID == member {
			return nil
		}
	}
	return fmt.Errorf("not a member of consumer group %q (group state %s)", g.group, d.State)
}
