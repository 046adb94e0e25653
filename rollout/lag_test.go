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
	"github.com/causet/projection-retry/rollout"
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
	r := startLateListedRollout(t, s, "lag-test")
	onTime := contract.RetryWorkflowID("artist_followers", "production", r.follows[2])
	require.Equal(t, 1, r.check.ToReplay, "follow-02 is a dead letter to replay; follow-01 is listed retrying; follow-00 is out of order")
	require.Equal(t, 2, r.check.WouldApply)
	require.Equal(t, 1, r.batch.Replayed)
	require.True(t, r.batch.Done)
	late, lag, count := r.late, r.lag, func() contract.SettledCount { t.Helper(); return r.count(t) }
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
	for _, ev := range r.follows[1:] {
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

// lateListedRollout is a rollout of artist_followers whose check ran while
// visibility listed follow-01's dead letter (late) as retrying: checked,
// deployed, and its batch of dead letters replayed.
type lateListedRollout struct {
	s          *stack
	runner     *rollout.Runner
	lag        *laggingVisibility
	follows    []string
	late, id   string
	check      contract.CheckCandidateResult
	batch      contract.ReplayFailingResult
	deployedAt time.Time
}

func startLateListedRollout(t *testing.T, s *stack, name string) *lateListedRollout {
	t.Helper()
	r := &lateListedRollout{s: s, id: "projection-rollout:artist_followers:" + name}
	r.follows, _ = s.produce(t, 3)
	s.waitDeadLettered(t, 3)
	r.late = contract.RetryWorkflowID("artist_followers", "production", r.follows[1])
	var err error
	r.runner, err = s.svc.RolloutRunner()
	require.NoError(t, err)
	r.lag = &laggingVisibility{Client: r.runner.Sources.Temporal}
	r.lag.set(map[string]bool{r.late: true}, false)
	r.runner.Sources.Temporal = r.lag

	in := contract.RolloutInput{Projection: "artist_followers", Document: mustJSON(t, candidate(t, true)), Limit: 100, Rate: 100}
	r.check, err = r.runner.Check(s.ctx, r.id, in, nil, nil)
	require.NoError(t, err)
	r.deployedAt = time.Now()
	_, err = r.runner.Deploy(s.ctx, in)
	require.NoError(t, err)
	r.batch, err = r.runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: r.id, Batch: 10, Rate: 100}, nil, nil)
	require.NoError(t, err)
	return r
}

func (r *lateListedRollout) count(t *testing.T) contract.SettledCount {
	t.Helper()
	c, err := r.runner.CountSettled(r.s.ctx, contract.CountSettledInput{RolloutID: r.id, Projection: "artist_followers", DeployedAt: r.deployedAt})
	require.NoError(t, err)
	return c
}

// A dead letter listed late whose key has applied a later event since
// cannot apply: the count does not replay it (the replay would be refused
// and dead-letter it again) and counts it as failing.
func TestCountSettledCountsALateDeadLetterWhoseKeyMovedOnAsFailing(t *testing.T) {
	s := newStack(t, nil)
	r := startLateListedRollout(t, s, "moved-on-test")
	require.Equal(t, 2, r.check.WouldApply)

	// user-01's key moves on: a later event of it applied.
	_, err := s.svc.Pool.Exec(s.ctx, `INSERT INTO causet_applied_sequences (projection, fork_id, entity_id, sequence, event_id)
VALUES ('artist_followers', 'production', 'user-01', 2, 'a-later-event')`)
	require.NoError(t, err)
	r.lag.set(nil, false)
	c := r.count(t)
	require.Zero(t, c.Replayed, "%+v", c)
	require.Equal(t, 1, c.Failing, "%+v", c)
	require.Zero(t, s.replaySignals(t, r.late), "no replay sent to a dead letter whose key moved on")
}

// A dead letter listed late while events of its entity are parked (about
// to be released behind it) is not replayed by that count, which would race
// the release: it stays pending, and the first count after the entity's
// parked events are gone replays it, once.
func TestCountSettledWaitsForTheParkedEventsOfALateDeadLetter(t *testing.T) {
	s := newStack(t, nil)
	r := startLateListedRollout(t, s, "parked-test")
	require.Equal(t, 2, r.check.WouldApply)

	_, err := s.svc.Pool.Exec(s.ctx, `INSERT INTO causet_parked_events (topic, partition, projection, fork_id, entity_id, event_id, retry)
VALUES ('t', 0, 'artist_followers', 'production', 'user-01', 'a-parked-event', '{}')`)
	require.NoError(t, err)
	r.lag.set(nil, false)
	c := r.count(t)
	require.Zero(t, c.Replayed, "%+v", c)
	require.GreaterOrEqual(t, c.Pending, 1, "follow-01 waits for its entity's parked events: %+v", c)
	require.Zero(t, s.replaySignals(t, r.late), "no replay while its entity's events are parked")

	_, err = s.svc.Pool.Exec(s.ctx, `DELETE FROM causet_parked_events WHERE event_id = 'a-parked-event'`)
	require.NoError(t, err)
	c = r.count(t)
	require.Equal(t, 1, c.Replayed, "%+v", c)
	require.Equal(t, 1, s.replaySignals(t, r.late))
}
