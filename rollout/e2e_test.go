package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
	"github.com/causet/projection-retry/rollout"
)

var recordHistories = flag.Bool("record-histories", false, "write the rollout workflow histories of the end-to-end tests to ../workflows/testdata")

func TestMain(m *testing.M) { testenv.Main(m) }

// stack is a worker and a bridge of one service on the test's database,
// topics and task queue, with artist_followers deployed on a table that
// lacks its followed_at column: every follow fails (sql), an unfollow
// applies.
type stack struct {
	ctx      context.Context
	svc      *app.Service
	temporal testenv.TemporalServer
	producer *kgo.Client
	prefix   string
}

func newStack(t testing.TB, more map[string]string) *stack {
	t.Helper()
	return newStackOn(t, testenv.Temporal(t), more)
}

// stackTimeout bounds a stack's test (its bridge runs as long).
var stackTimeout = 4 * time.Minute

// newStackOn is newStack on the Temporal server srv.
func newStackOn(t testing.TB, srv testenv.TemporalServer, more map[string]string) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stackTimeout)
	t.Cleanup(cancel)
	brokers := testenv.Kafka(t)
	topic, dlqTopic := testenv.Topic(t, "causet.events.v1"), testenv.Topic(t, "causet.dlq")
	testenv.CreateTopic(t, brokers, topic, 1)
	testenv.CreateTopic(t, brokers, dlqTopic, 1)
	env := map[string]string{
		"DATABASE_URL": testenv.PostgresURL(t), "KAFKA_BROKERS": brokers[0],
		"CAUSET_EVENTS_TOPIC": topic, "CAUSET_DLQ_TOPIC": dlqTopic,
		"CAUSET_CONSUMER_GROUP": testenv.Topic(t, "group"), "CAUSET_TASK_QUEUE": testenv.TaskQueue(t),
		// Two attempts a second apart: dead letters within seconds.
		"PROJECTION_WORKER_MAX_RETRIES": "2", "PROJECTION_WORKER_RETRY_INITIAL_MS": "1000",
		"PROJECTION_WORKER_RETRY_MULTIPLIER": "1", "PROJECTION_WORKER_RETRY_MAX_MS": "1000",
	}
	maps.Copy(env, more)
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	svc, err := app.Open(ctx, cfg, app.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), app.WithTemporalAddress(srv.HostPort))
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	_, err = svc.Pool.Exec(ctx, testenv.FollowersNoFollowedAtDDL)
	require.NoError(t, err)
	data, err := exampleprojections.Document("artist_followers")
	require.NoError(t, err)
	doc, err := projection.Parse(data)
	require.NoError(t, err)
	_, err = svc.Engine.Deploy(ctx, doc)
	require.NoError(t, err)

	s := &stack{ctx: ctx, svc: svc, temporal: srv, prefix: testenv.Topic(t, "e")}
	s.startWorker(t)
	b, err := svc.NewBridge()
	require.NoError(t, err)
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	t.Cleanup(func() { stop(); <-done })
	s.producer, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(s.producer.Close)
	return s
}

func (s *stack) startWorker(t testing.TB) {
	t.Helper()
	w, err := s.svc.NewWorker()
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
}

// produce sends the events of users: a follow of artist-a each (which
// fails), and for the first one an unfollow after it (parked behind it).
func (s *stack) produce(t *testing.T, users int) (follows []string, unfollow string) {
	t.Helper()
	var recs []*kgo.Record
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for i := range users {
		user := fmt.Sprintf("user-%02d", i)
		id := fmt.Sprintf("%s-follow-%02d", s.prefix, i)
		follows = append(follows, id)
		recs = append(recs, record(t, event.Envelope{EventID: id, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production",
			Sequence: 1, OccurredAt: at, Payload: json.RawMessage(`{"artistId":"artist-a"}`)}))
	}
	unfollow = s.prefix + "-unfollow-00"
	recs = append(recs, record(t, event.Envelope{EventID: unfollow, EventType: "ARTIST_UNFOLLOWED", EntityID: "user-00", ForkID: "production",
		Sequence: 2, OccurredAt: at.Add(time.Minute), Payload: json.RawMessage(`{"artistId":"artist-a"}`)}))
	require.NoError(t, s.producer.ProduceSync(s.ctx, recs...).FirstErr())
	return follows, unfollow
}

func record(t *testing.T, ev event.Envelope) *kgo.Record {
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return &kgo.Record{Key: []byte(ev.EntityID), Value: b}
}

// waitDeadLettered waits until n runs of artist_followers on the test's
// task queue are dead-lettered.
func (s *stack) waitDeadLettered(t *testing.T, n int) {
	t.Helper()
	q := fmt.Sprintf("%s = 'artist_followers' AND %s = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'",
		contract.AttrProjection.GetName(), contract.AttrRetryState.GetName(), contract.StateDeadLettered, s.svc.Config.TaskQueue)
	require.Eventually(t, func() bool { return len(s.temporal.ListWorkflows(t, q)) == n }, time.Minute, 200*time.Millisecond)
}

// candidate is artist_followers, fixed (without followed_at) or not.
func candidate(t testing.TB, fixed bool) *projection.Document {
	t.Helper()
	data, err := exampleprojections.Document("artist_followers")
	require.NoError(t, err)
	if fixed {
		data = []byte(strings.Replace(string(data), "      followed_at: event.occurredAt\n", "", 1))
	}
	doc, err := projection.Parse(data)
	require.NoError(t, err)
	return doc
}

func (s *stack) check(t *testing.T, doc *projection.Document) rollout.Report {
	t.Helper()
	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	failing, g, err := rollout.Gather(s.ctx, runner.Sources, doc.Name, 1000)
	require.NoError(t, err)
	rep, err := rollout.Check(s.ctx, s.svc.Engine, doc, failing, g)
	require.NoError(t, err)
	return rep
}

// rollout runs a rollout to its end and returns its ID, run ID and
// progress (a stopped one's from its failure's details).
func (s *stack) rollout(t *testing.T, doc *projection.Document, version int, maxFailing float64) (string, string, contract.RolloutProgress) {
	t.Helper()
	return s.rolloutAt(t, doc, version, maxFailing, 50)
}

// rolloutAt is rollout at rate replays a second (batches of 5 s of them,
// 10 to 100).
func (s *stack) rolloutAt(t *testing.T, doc *projection.Document, version int, maxFailing, rate float64) (string, string, contract.RolloutProgress) {
	t.Helper()
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	in := contract.RolloutInput{Projection: doc.Name, Document: body, Version: version, MaxFailing: maxFailing, Rate: rate, Limit: 1000, Identity: "test"}
	id := contract.RolloutWorkflowID(doc.Name, version, body)
	run, err := s.svc.Temporal.Client.ExecuteWorkflow(s.ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.svc.Config.TaskQueue},
		contract.RolloutWorkflowName, in)
	require.NoError(t, err)
	var p contract.RolloutProgress
	err = run.Get(s.ctx, &p)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == contract.RolloutStoppedType {
		require.NoError(t, appErr.Details(&p))
		require.Equal(t, contract.RolloutStopped, p.State)
		return id, run.GetRunID(), p
	}
	require.NoError(t, err)
	return id, run.GetRunID(), p
}

func (s *stack) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.svc.Pool.QueryRow(s.ctx, sql, args...).Scan(&n))
	return n
}

// A wrong candidate is reported still failing, and its rollout stops after
// the check with nothing deployed; the fix is reported applicable, and its
// rollout deploys it and applies every affected event once, the parked
// unfollow after its follow.
func TestRolloutWrongThenRightCandidate(t *testing.T) {
	// A dead letter keeps its entity's later events parked behind it.
	s := newStack(t, map[string]string{"CAUSET_DLQ_HOLD_ENTITY": "true"})
	const users = 6
	follows, unfollow := s.produce(t, users)
	s.waitDeadLettered(t, users)

	wrong := s.check(t, candidate(t, false))
	require.Equal(t, users+1, wrong.Checked, "every dead letter and the parked unfollow: %+v", wrong.BySource)
	require.Equal(t, users, wrong.BySource[rollout.DeadLettered])
	require.Equal(t, 1, wrong.BySource[rollout.Parked])
	require.Equal(t, users, wrong.Totals[rollout.StillFails])
	require.Equal(t, 1, wrong.Totals[rollout.WouldApply], "the unfollow does not touch the column")
	require.Len(t, wrong.Groups, 1, "one fingerprint: the follows' error, the unfollow parked behind one of them")
	require.Len(t, wrong.Groups[0].StillFailing, 1)
	require.Contains(t, wrong.Groups[0].StillFailing[0].Error, `column "followed_at"`)
	require.Contains(t, wrong.Text(0), "still failing with the candidate")

	_, stoppedRun, p := s.rollout(t, candidate(t, false), 2, 0.1)
	require.Equal(t, contract.RolloutStopped, p.State, p.Reason)
	require.False(t, p.Deployed)
	require.Contains(t, p.Reason, "nothing was deployed")
	require.Equal(t, 1, s.svc.Engine.Version("artist_followers"), "the wrong candidate was not deployed")

	right := s.check(t, candidate(t, true))
	require.Equal(t, users+1, right.Totals[rollout.WouldApply], "%s", right.Text(0))
	require.Zero(t, s.count(t, `SELECT count(*) FROM artist_followers`), "checks write nothing")

	// The stopped rollout may be run again with the fix: same version.
	id, doneRun, p := s.rollout(t, candidate(t, true), 2, 0.1)
	require.NotEqual(t, stoppedRun, doneRun)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.True(t, p.Deployed)
	require.Equal(t, 2, p.Version)
	require.Equal(t, users, p.Replayed)
	require.Equal(t, users+1, p.Applied)
	require.Zero(t, p.Failing)
	require.Zero(t, p.Pending)
	// user-00 followed, then unfollowed: in order, it follows no one.
	require.Equal(t, users-1, s.count(t, `SELECT count(*) FROM artist_followers`))
	require.Zero(t, s.count(t, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-00'`))
	for _, id := range append(follows, unfollow) {
		require.Equal(t, 1, s.count(t, `SELECT count(*) FROM causet_projection_applied WHERE key = $1`,
			projection.DedupeKey("artist_followers", "production", id)), "%s applied once", id)
	}
	if *recordHistories {
		testenv.WriteHistory(t, s.ctx, s.svc.Temporal.Client, id, stoppedRun, filepath.Join("..", "workflows", "testdata", "rollout_stopped_at_check.json"))
		testenv.WriteHistory(t, s.ctx, s.svc.Temporal.Client, id, doneRun, filepath.Join("..", "workflows", "testdata", "rollout_done.json"))
	}
	// The UI's list shows the counts.
	desc, err := s.svc.Temporal.Client.DescribeWorkflow(s.ctx, id, "")
	require.NoError(t, err)
	var applied int64
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[contract.AttrRolloutApplied.GetName()], &applied))
	require.EqualValues(t, users+1, applied)

	// Started again, the same rollout finds the run that ran: nothing is
	// checked, deployed or replayed twice.
	first := desc.RawResponse
	again, err := s.svc.Temporal.Client.ExecuteWorkflow(s.ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.svc.Config.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY}, contract.RolloutWorkflowName, contract.RolloutInput{})
	require.NoError(t, err)
	require.Equal(t, first.GetWorkflowExecutionInfo().GetExecution().GetRunId(), again.GetRunID())
	var same contract.RolloutProgress
	require.NoError(t, again.Get(s.ctx, &same))
	require.Equal(t, p, same)
	require.Equal(t, 2, s.svc.Engine.Version("artist_followers"))
}

// By default a dead letter lets its entity's later events go: the
// unfollow applies, and the follow's replay would now apply an older event
// after it, which a replay refuses. The check says so, and the rollout
// leaves that dead letter alone.
func TestRolloutOutOfOrderDeadLetter(t *testing.T) {
	s := newStack(t, nil)
	const users = 3
	s.produce(t, users)
	s.waitDeadLettered(t, users)
	require.Eventually(t, func() bool { return s.count(t, `SELECT count(*) FROM causet_projection_applied`) == 1 }, 30*time.Second, 100*time.Millisecond,
		"the unfollow applies once its follow is dead-lettered")

	rep := s.check(t, candidate(t, true))
	require.Equal(t, users, rep.Checked)
	require.Equal(t, users-1, rep.Totals[rollout.WouldApply])
	require.Equal(t, 1, rep.Totals[rollout.OutOfOrder], "%s", rep.Text(0))

	_, _, p := s.rollout(t, candidate(t, true), 2, 0.1)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, 1, p.OutOfOrder)
	require.Equal(t, users-1, p.Replayed, "the out-of-order dead letter is not replayed")
	require.Equal(t, users-1, p.Applied)
	require.Zero(t, s.count(t, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-00'`), "the older follow never applies after the unfollow")
	require.Equal(t, users-1, s.count(t, `SELECT count(*) FROM artist_followers`))
}

// Dead letters whose records the check cannot read (no DLQ topic here, or
// past its retention) are read from their runs' histories, the same events.
func TestCheckReadsRunsWithoutRecords(t *testing.T) {
	s := newStack(t, nil)
	const users = 4
	follows, _ := s.produce(t, users)
	s.waitDeadLettered(t, users)
	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	src := runner.Sources
	src.DLQ = nil
	failing, g, err := rollout.Gather(s.ctx, src, "artist_followers", 100)
	require.NoError(t, err)
	require.Zero(t, g.DLQRecords)
	var ids []string
	for _, f := range failing {
		require.Equal(t, rollout.DeadLettered, f.Source)
		require.Nil(t, f.Item)
		require.Equal(t, "sql", f.ErrorKind, "the kind from the run's memo")
		ids = append(ids, f.Event.EventID)
	}
	require.ElementsMatch(t, follows, ids)
	// Limit bounds the runs read.
	failing, g, err = rollout.Gather(s.ctx, src, "artist_followers", 2)
	require.NoError(t, err)
	require.Len(t, failing, 2)
	require.True(t, g.Truncated)
}

// A half-right fix: the follows without an artistId fail with it too (a
// CEL error instead of the missing column). The check reports both
// outcomes in the group, with the failure the fix still meets; the rollout
// replays only what the fix applies, and the others stay dead letters.
func TestRolloutHalfRightCandidate(t *testing.T) {
	s := newStack(t, nil)
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range 6 {
		payload := `{"artistId":"artist-a"}`
		if i%3 == 0 {
			payload = `{}`
		}
		recs = append(recs, record(t, event.Envelope{EventID: fmt.Sprintf("%s-half-%d", s.prefix, i), EventType: "ARTIST_FOLLOWED",
			EntityID: fmt.Sprintf("user-%d", i), ForkID: "production", OccurredAt: at, Payload: json.RawMessage(payload)}))
	}
	require.NoError(t, s.producer.ProduceSync(s.ctx, recs...).FirstErr())
	s.waitDeadLettered(t, 6)

	rep := s.check(t, candidate(t, true))
	require.Equal(t, 6, rep.Checked)
	require.Len(t, rep.Groups, 1, "one failure now: the missing column")
	g := rep.Groups[0]
	require.Equal(t, 4, g.Outcomes[rollout.WouldApply])
	require.Equal(t, 2, g.Outcomes[rollout.StillFails])
	require.Len(t, g.StillFailing, 1)
	require.Equal(t, "ir_eval", g.StillFailing[0].ErrorKind)
	require.Contains(t, g.StillFailing[0].Error, "no such key: artistId")
	require.Equal(t, 2, g.StillFailing[0].Events)

	_, _, p := s.rollout(t, candidate(t, true), 2, 0.5)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, 4, p.Replayed)
	require.Equal(t, 4, p.Applied)
	require.Equal(t, 4, s.count(t, `SELECT count(*) FROM artist_followers`))
	s.waitDeadLettered(t, 2)
}

// A batch retried after its worker was lost goes on after the last replay
// its heartbeat reported, with the rest of the batch only.
func TestReplayBatchResumesAfterItsHeartbeat(t *testing.T) {
	s := newStack(t, nil)
	s.produce(t, 6)
	s.waitDeadLettered(t, 6)
	require.Eventually(t, func() bool { return s.count(t, `SELECT count(*) FROM causet_projection_applied`) == 1 }, 30*time.Second, 100*time.Millisecond,
		"the unfollow applies once its follow is dead-lettered")
	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	id := "projection-rollout:artist_followers:resume-test"
	in := contract.RolloutInput{Projection: "artist_followers", Document: mustJSON(t, candidate(t, true)), Limit: 100}
	chk, err := runner.Check(s.ctx, id, in, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 5, chk.ToReplay, "6 dead letters, user-00's out of order: its unfollow applied")

	// The first try replayed two, then its worker was lost.
	first, err := runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: id, Batch: 2, Rate: 100}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 2, first.Tried)
	var beats []contract.ReplayFailingResult
	rest, err := runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: id, Batch: 5, Rate: 100}, &first,
		func(r contract.ReplayFailingResult) { beats = append(beats, r) })
	require.NoError(t, err)
	require.Equal(t, 5, rest.Tried, "the batch of 5 was two in when its worker was lost: three more")
	require.Equal(t, 5, rest.Replayed, "the first try's two and three more, none twice")
	require.Len(t, beats, 3)
	require.False(t, rest.Done)
	last, err := runner.ReplayBatch(s.ctx, contract.ReplayFailingInput{RolloutID: id, After: rest.Next, Batch: 5, Rate: 100}, nil, nil)
	require.NoError(t, err)
	require.Zero(t, last.Replayed)
	require.True(t, last.Done)
}

// failingTrier is an engine whose tries fail from the failAt-th call on,
// as a check whose worker is lost there; it counts the events tried.
type failingTrier struct {
	rollout.Engine
	calls, failAt, tried int
}

func (f *failingTrier) Try(ctx context.Context, doc *projection.Document, evs []event.Envelope) ([]projection.Trial, error) {
	if f.calls++; f.failAt > 0 && f.calls >= f.failAt {
		return nil, errors.New("worker lost")
	}
	f.tried += len(evs)
	return f.Engine.Try(ctx, doc, evs)
}

// A check tried again after its worker was lost goes on from its last
// progress: the pages recorded by then are kept and not tried again; a page
// recorded after it (its progress not reported) is tried again, never
// recorded twice; the result counts every event once.
func TestCheckResumesFromItsProgress(t *testing.T) {
	s := newStack(t, nil)
	s.produce(t, 7)
	s.waitDeadLettered(t, 7)
	require.Eventually(t, func() bool { return s.count(t, `SELECT count(*) FROM causet_projection_applied`) == 1 }, 30*time.Second, 100*time.Millisecond,
		"the unfollow applies once its follow is dead-lettered")
	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	runner.CheckPage = 2
	id := "projection-rollout:artist_followers:check-resume-test"
	in := contract.RolloutInput{Projection: "artist_followers", Document: mustJSON(t, candidate(t, true)), Limit: 100}

	whole, err := runner.Check(s.ctx, id+"-whole", in, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 7, whole.Affected, "7 dead letters (the unfollow behind user-00's applied)")

	// The first try records three pages, reports two, and is lost in the fourth.
	lost := &failingTrier{Engine: runner.Engine, failAt: 4}
	runner.Engine = lost
	var beats []rollout.CheckProgress
	_, err = runner.Check(s.ctx, id, in, nil, func(p rollout.CheckProgress) {
		if len(beats) < 2 {
			beats = append(beats, p)
		}
	})
	require.ErrorContains(t, err, "worker lost")
	require.Equal(t, 6, lost.tried)
	require.Equal(t, 6, s.count(t, `SELECT count(*) FROM causet_rollout_events WHERE rollout_id = $1`, id))
	require.Equal(t, 4, beats[1].Recorded)

	again := &failingTrier{Engine: lost.Engine}
	runner.Engine = again
	got, err := runner.Check(s.ctx, id, in, &beats[1], nil)
	require.NoError(t, err)
	require.Equal(t, 3, again.tried, "the page after the last progress and the rest, and no more")
	require.Equal(t, whole.Affected, got.Affected)
	require.Equal(t, whole.WouldApply, got.WouldApply)
	require.Equal(t, whole.OutOfOrder, got.OutOfOrder)
	require.Equal(t, whole.ToReplay, got.ToReplay)
	require.Equal(t, 7, s.count(t, `SELECT count(DISTINCT dedupe_key) FROM causet_rollout_events WHERE rollout_id = $1`, id))
	require.Equal(t, 7, s.count(t, `SELECT count(*) FROM causet_rollout_events WHERE rollout_id = $1`, id))
	require.Equal(t, 7, s.count(t, `SELECT max(seq) FROM causet_rollout_events WHERE rollout_id = $1`, id))
	require.Contains(t, got.Summary, "on 7 failing events")

	// Without progress, a try starts again from nothing.
	got, err = runner.Check(s.ctx, id, in, nil, nil)
	require.NoError(t, err)
	require.Equal(t, whole.ToReplay, got.ToReplay)
	require.Equal(t, 7, s.count(t, `SELECT count(*) FROM causet_rollout_events WHERE rollout_id = $1`, id))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// Under CAUSET_INCIDENT_POLICY=hold an incident holds the failing follows:
// the check finds them held, and the rollout's deploy has the incident probe
// at once, which releases them.
func TestRolloutReleasesHeldEvents(t *testing.T) {
	s := newStack(t, map[string]string{"CAUSET_INCIDENT_POLICY": "hold", "CAUSET_INCIDENT_THRESHOLD": "2"})
	const users = 6
	follows, _ := s.produce(t, users)
	require.Eventually(t, func() bool {
		return s.count(t, `SELECT count(*) FROM causet_parked_events p JOIN causet_blocked_keys k USING (topic, partition, projection, fork_id, entity_id)
WHERE k.head_workflow_id LIKE 'projection-incident:%'`) > 0
	}, time.Minute, 100*time.Millisecond, "no event held by an incident")

	// user-00's unfollow waits behind its follow's retry run, whose error
	// the check reads from Temporal's list of runs: visibility shows a
	// run started a moment ago only a moment later, and until then the
	// unfollow's group names no error ("parked").
	var rep rollout.Report
	require.Eventually(t, func() bool {
		rep = s.check(t, candidate(t, true))
		return !slices.ContainsFunc(rep.Groups, func(g rollout.Group) bool { return g.ErrorKind == "parked" })
	}, 30*time.Second, time.Second, "a group waits on no error: %s", rep.Text(0))
	require.Positive(t, rep.BySource[rollout.Held], "%s", rep.Text(0))
	require.Equal(t, rep.Checked, rep.Totals[rollout.WouldApply], "%s", rep.Text(0))
	for _, g := range rep.Groups {
		require.Equal(t, "sql", g.ErrorKind, "held events wait on the incident's error: %+v", g)
		require.Contains(t, g.Error, `column "followed_at"`)
	}

	_, _, p := s.rollout(t, candidate(t, true), 2, 0.1)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, p.WouldApply, p.Applied)
	require.Eventually(t, func() bool { return s.count(t, `SELECT count(*) FROM artist_followers`) == users-1 }, time.Minute, 200*time.Millisecond,
		"every follow applied, user-00's then its unfollow")
	for _, id := range follows {
		require.Equal(t, 1, s.count(t, `SELECT count(*) FROM causet_projection_applied WHERE key = $1`,
			projection.DedupeKey("artist_followers", "production", id)), "%s applied once", id)
	}
}

// deadLettersAfterADeploy deploys the fix by hand as version 2, then makes
// every event fail for another reason (its table is away) until n users'
// follows and user-00's unfollow are dead-lettered after that deploy, and
// brings the table back: version 2 now applies them all.
func (s *stack) deadLettersAfterADeploy(t *testing.T, n int) (follows []string, unfollow string) {
	t.Helper()
	_, err := s.svc.Engine.Deploy(s.ctx, candidate(t, true))
	require.NoError(t, err)
	_, err = s.svc.Pool.Exec(s.ctx, `ALTER TABLE artist_followers RENAME TO artist_followers_away`)
	require.NoError(t, err)
	follows, unfollow = s.produce(t, n)
	s.waitDeadLettered(t, n+1)
	_, err = s.svc.Pool.Exec(s.ctx, `ALTER TABLE artist_followers_away RENAME TO artist_followers`)
	require.NoError(t, err)
	return follows, unfollow
}

// A rollout of the candidate deployed already (a rerun, a deploy by hand)
// counts failing again from its own start, not from that older deploy:
// the dead letters since are the ones it replays, not failures. Two dead
// letters of one entity (user-00's follow, then its unfollow) replay in
// their order: both apply. More dead letters than a batch: the ones not
// replayed yet at the first count are not "failing again".
func TestRolloutOfTheDeployedCandidate(t *testing.T) {
	s := newStack(t, nil)
	const users = 14
	follows, unfollow := s.deadLettersAfterADeploy(t, users)

	_, _, p := s.rolloutAt(t, candidate(t, true), 2, 0.1, 1)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, users+1, p.Replayed)
	require.Equal(t, users+1, p.Applied)
	require.Zero(t, p.Failing)
	for _, id := range append(follows, unfollow) {
		require.Equal(t, 1, s.count(t, `SELECT count(*) FROM causet_projection_applied WHERE key = $1`,
			projection.DedupeKey("artist_followers", "production", id)), "%s applied once, in its entity's order", id)
	}
	require.Zero(t, s.count(t, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-00'`), "user-00 followed, then unfollowed")
	require.Equal(t, users-1, s.count(t, `SELECT count(*) FROM artist_followers`))
}

// Two candidates with one version are two rollouts (the ID names the
// candidate's content), and the second, finding the first's version
// deployed since it was planned, stops with that reason and deploys
// nothing.
func TestRolloutTwoCandidatesOneVersion(t *testing.T) {
	s := newStack(t, nil)
	s.produce(t, 2)
	s.waitDeadLettered(t, 2)
	a := candidate(t, true)
	b := candidate(t, true)
	b.On["ARTIST_FOLLOWED"].Columns["user_id"] = "string(event.entityId)"
	idA, _, p := s.rollout(t, a, 2, 0.5)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	idB, _, p := s.rollout(t, b, 2, 0.5)
	require.NotEqual(t, idA, idB, "a different candidate never joins another's rollout")
	require.Equal(t, contract.RolloutStopped, p.State)
	require.False(t, p.Deployed)
	require.Contains(t, p.Reason, "version 2 of artist_followers was deployed by someone else after the rollout started")
	require.Equal(t, 2, s.svc.Engine.Version("artist_followers"), "the second candidate was not deployed over the first")
}

// Two dead letters of one entity in one batch, on different paths: the
// follow's run was terminated (its replay starts a new run), the
// unfollow's is open (a signal). The rollout sends the unfollow only once
// the follow's new run has applied it, so both apply, in order.
// TestRecordPutsAnEntitysDeadLettersInOrder shows the order when the check
// finds them the other way round.
func TestRolloutReplaysAnEntitysDeadLettersInOrder(t *testing.T) {
	s := newStack(t, nil)
	follows, unfollow := s.deadLettersAfterADeploy(t, 3)
	first := contract.RetryWorkflowID("artist_followers", "production", follows[0])
	require.NoError(t, s.svc.Temporal.Client.TerminateWorkflow(s.ctx, first, "", "closed by an operator"))

	_, _, p := s.rolloutAt(t, candidate(t, true), 2, 0.1, 100)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, 4, p.Replayed)
	for _, id := range []string{follows[0], unfollow} {
		require.Equal(t, 1, s.count(t, `SELECT count(*) FROM causet_projection_applied WHERE key = $1`,
			projection.DedupeKey("artist_followers", "production", id)), "%s applied (not refused as out of order)", id)
	}
	require.Zero(t, s.count(t, `SELECT count(*) FROM artist_followers WHERE user_id = 'user-00'`), "followed, then unfollowed")
}

// On a server that suggests continuing as new after 30 history events and
// fails a run at 100 (Temporal's are 4,096 and 51,200), a rollout of 80
// dead letters in batches of 10 continues as new with its progress: no
// run's history reaches the limit, though the rollout's events together
// pass it, and it ends with every dead letter applied once.
func TestRolloutContinuesAsNewUnderTheHistoryLimit(t *testing.T) {
	const limit = 100
	srv := testenv.TemporalWithLimits(t, map[string]string{
		"limit.historyCount.suggestContinueAsNew": "30",
		"limit.historyCount.error":                fmt.Sprint(limit),
	})
	s := newStackOn(t, srv, nil)
	runner, err := s.svc.RolloutRunner()
	require.NoError(t, err)
	const n = 80
	produceDeadLetters(t, s.ctx, runner.Sources.DLQ, s.prefix, n)

	id, _, p := s.rolloutAt(t, candidate(t, true), 2, 0.1, 2)
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, n, p.Replayed)
	require.Equal(t, n, p.Applied)
	require.Equal(t, n, s.count(t, `SELECT count(*) FROM causet_projection_applied`), "each once")

	resp, err := srv.Client.ListWorkflow(s.ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace,
		Query: fmt.Sprintf("WorkflowId = '%s'", id)})
	require.NoError(t, err)
	runs, total := 0, 0
	for _, e := range resp.GetExecutions() {
		d, err := srv.Client.DescribeWorkflow(s.ctx, id, e.GetExecution().GetRunId())
		require.NoError(t, err)
		length := int(d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength())
		require.Less(t, length, limit, "run %s", e.GetExecution().GetRunId())
		runs++
		total += length
	}
	require.GreaterOrEqual(t, runs, 2, "it continued as new")
	if *recordHistories {
		// The list is newest first: the last run (resumed, done) and the
		// first (checked, deployed, continued as new).
		execs := resp.GetExecutions()
		testenv.WriteHistory(t, s.ctx, srv.Client, id, execs[len(execs)-1].GetExecution().GetRunId(),
			filepath.Join("..", "workflows", "testdata", "rollout_continued_as_new.json"))
		testenv.WriteHistory(t, s.ctx, srv.Client, id, execs[0].GetExecution().GetRunId(),
			filepath.Join("..", "workflows", "testdata", "rollout_resumed_done.json"))
	}
	require.Greater(t, total, limit, "one run would have passed the limit")
	t.Logf("%d dead letters: %d runs, %d history events in all", n, runs, total)
}
