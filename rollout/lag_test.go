package rollout_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/projection"
)

// laggingVisibility is a Temporal client whose list queries answer as an
// eventually consistent visibility store may: the runs in behind are
// listed in the state they had before they were dead-lettered (retrying),
// and once frozen, every query answers what it answered last (a stale
// listing).
type laggingVisibility struct {
	client.Client
	mu     sync.Mutex
	behind map[string]bool
	frozen bool
	last   map[string]*workflowservice.ListWorkflowExecutionsResponse
}

func (l *laggingVisibility) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		if resp, ok := l.last[req.GetQuery()]; ok {
			return proto.Clone(resp).(*workflowservice.ListWorkflowExecutionsResponse), nil
		}
	}
	resp, err := l.Client.ListWorkflow(ctx, req)
	if err != nil {
		return nil, err
	}
	retrying, err := converter.GetDefaultDataConverter().ToPayload(string(contract.StateRetrying))
	if err != nil {
		return nil, err
	}
	deadLettersOnly := strings.Contains(req.GetQuery(), "= '"+string(contract.StateDeadLettered)+"'")
	kept := resp.GetExecutions()[:0]
	for _, e := range resp.GetExecutions() {
		if l.behind[e.GetExecution().GetWorkflowId()] {
			if deadLettersOnly {
				continue // listed as retrying: not a dead letter yet
			}
			e.GetSearchAttributes().GetIndexedFields()[contract.AttrRetryState.GetName()] = retrying
		}
		kept = append(kept, e)
	}
	resp.Executions = kept
	if l.last == nil {
		l.last = map[string]*workflowservice.ListWorkflowExecutionsResponse{}
	}
	l.last[req.GetQuery()] = proto.Clone(resp).(*workflowservice.ListWorkflowExecutionsResponse)
	return resp, nil
}

func (l *laggingVisibility) set(behind map[string]bool, frozen bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.behind, l.frozen = behind, frozen
}

// A dead letter that visibility lists late (as retrying at the check, so
// no batch replays it; the same as one dead-lettered between the check and
// the deploy) is replayed by the first count that lists it; a count that
// reads a stale listing (the run was replayed since) sends nothing more.
// Each applies once, with one replay signal.
func TestCountSettledReplaysADeadLetterListedLate(t *testing.T) {
	s := newStack(t, nil)
	follows, _ := s.produce(t, 3)
	s.waitDeadLettered(t, 3)
	late := contract.RetryWorkflowID("artist_followers", "production", follows[1])
	onTime := contract.RetryWorkflowID("artist_followers", "production", follows[2])

	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	lag := &laggingVisibility{Client: runner.Sources.Temporal}
	lag.set(map[string]bool{late: true}, false)
	runner.Sources.Temporal = lag

	id := "projection-rollout:artist_followers:lag-test"
	in := contract.RolloutInput{Projection: "artist_followers", Document: mustJSON(t, candidate(t, true)), Limit: 100, Rate: 100}
	chk, err := runner.Check(s.ctx, id, in, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, chk.ToReplay, "follow-02 is a dead letter to replay; follow-01 is listed retrying; follow-00 is out of order")
	require.Equal(t, 2, chk.WouldApply)
	deployedAt := time.Now()
	_, err = runner.Deploy(s.ctx, in)
	require.NoError(t, err)
	batch, err := runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: id, Batch: 10, Rate: 100}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, batch.Replayed)
	require.True(t, batch.Done)

	count := func() contract.SettledCount {
		t.Helper()
		c, err := runner.CountSettled(s.ctx, contract.CountSettledInput{RolloutID: id, Projection: "artist_followers", DeployedAt: deployedAt})
		require.NoError(t, err)
		return c
	}
	// Still listed as retrying: pending, nothing sent.
	c := count()
	require.Zero(t, c.Replayed, "%+v", c)
	require.Equal(t, 2, c.Applied+c.Pending, "%+v", c)
	require.GreaterOrEqual(t, c.Pending, 1, "follow-01 waits: %+v", c)

	// Listed at last: replayed, once.
	lag.set(nil, false)
	c = count()
	require.Equal(t, 1, c.Replayed, "%+v", c)
	// A stale listing (the one just read) finds it replaying or applied.
	lag.set(nil, true)
	c = count()
	require.Zero(t, c.Replayed, "a stale listing replays nothing twice: %+v", c)
	lag.set(nil, false)

	require.Eventually(t, func() bool { c = count(); return c.Applied == 2 }, time.Minute, 200*time.Millisecond, "%+v", c)
	require.Zero(t, c.Pending)
	require.Zero(t, c.Replayed)
	for _, wf := range []string{late, onTime} {
		require.Equal(t, 1, s.replaySignals(t, wf), "one replay signal to %s", wf)
	}
	for _, ev := range follows[1:] {
		require.Equal(t, 1, s.count(t, `SELECT count(*) FROM causet_projection_applied WHERE key = $1`,
			projection.DedupeKey("artist_followers", "production", ev)), "%s applied once", ev)
	}
}

// replaySignals counts the replay signals in the history of run id.
func (s *stack) replaySignals(t *testing.T, id string) int {
	t.Helper()
	it := s.svc.Temporal.Client.GetWorkflowHistory(s.ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == contract.SignalReplay {
			n++
		}
	}
	return n
}

// A dead letter listed late whose key has applied a later event since
// cannot apply: the count does not replay it (the replay would be refused
// and dead-letter it again) and counts it as failing.
func TestCountSettledCountsALateDeadLetterWhoseKeyMovedOnAsFailing(t *testing.T) {
	s := newStack(t, nil)
	follows, _ := s.produce(t, 3)
	s.waitDeadLettered(t, 3)
	late := contract.RetryWorkflowID("artist_followers", "production", follows[1])

	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	lag := &laggingVisibility{Client: runner.Sources.Temporal}
	lag.set(map[string]bool{late: true}, false)
	runner.Sources.Temporal = lag

	id := "projection-rollout:artist_followers:moved-on-test"
	in := contract.RolloutInput{Projection: "artist_followers", Document: mustJSON(t, candidate(t, true)), Limit: 100, Rate: 100}
	chk, err := runner.Check(s.ctx, id, in, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 2, chk.WouldApply)
	deployedAt := time.Now()
	_, err = runner.Deploy(s.ctx, in)
	require.NoError(t, err)
	_, err = runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: id, Batch: 10, Rate: 100}, nil, nil)
	require.NoError(t, err)

	// user-01's key moves on: a later event of it applied.
	_, err = s.svc.Pool.Exec(s.ctx, `INSERT INTO causet_applied_sequences (projection, fork_id, entity_id, sequence, event_id)
VALUES ('artist_followers', 'production', 'user-01', 2, 'a-later-event')`)
	require.NoError(t, err)
	lag.set(nil, false)
	c, err := runner.CountSettled(s.ctx, contract.CountSettledInput{RolloutID: id, Projection: "artist_followers", DeployedAt: deployedAt})
	require.NoError(t, err)
	require.Zero(t, c.Replayed, "%+v", c)
	require.Equal(t, 1, c.Failing, "%+v", c)
	require.Zero(t, s.replaySignals(t, late), "no replay sent to a dead letter whose key moved on")
}
