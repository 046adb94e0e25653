package starter

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

// refuseLedgerRowSQL makes the dedupe ledger refuse the rows of the events
// listed in refused_ledger_events (fork, event ID), under any projection:
// the batch's multi-row ledger insert then fails as a whole while the
// database answers, as an event PostgreSQL cannot store would make it.
const refuseLedgerRowSQL = `
CREATE TABLE refused_ledger_events (fork_id text NOT NULL, event_id text NOT NULL);
CREATE FUNCTION refuse_bad_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE bad text;
BEGIN
  SELECT event_id INTO bad FROM refused_ledger_events
    WHERE causet_applied_key(NEW.projection, fork_id, event_id) = NEW.key LIMIT 1;
  IF FOUND THEN RAISE EXCEPTION 'ledger refuses %', bad; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_bad_event BEFORE INSERT ON causet_projection_applied
  FOR EACH ROW EXECUTE FUNCTION refuse_bad_event();`

// A batch that fails as a whole while the database answers its probe is no
// outage: the event at fault is isolated and handed off, and the events
// around it apply and the partition moves on, in both orderings.
func TestBridgeKafkaBatchErrorWithDatabaseUpIsolatesTheEvent(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		name := "ordering entity"
		if !ordered {
			name = "ordering none"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
			_, err := h.pool.Exec(h.ctx, refuseLedgerRowSQL)
			require.NoError(t, err)
			p := h.prefix
			_, err = h.pool.Exec(h.ctx, `INSERT INTO refused_ledger_events VALUES ('production', $1)`, p+"2-bad")
			require.NoError(t, err)
			starter := newRecordingStarter(nil)
			o := h.options(starter)
			if !ordered {
				o = h.plainOptions(starter)
			}
			r := h.start(o)

			h.produce(
				envRecord(0, played(p+"1", "artist-1", 1, 1)),
				envRecord(0, played(p+"2-bad", "artist-2", 1, 1)),
				envRecord(0, played(p+"3", "artist-3", 1, 1)),
			)
			h.waitCommittedToEnd(60 * time.Second)
			require.Equal(t, 2, h.count(`SELECT count(*) FROM artist_stats`), "the events around the bad one apply")
			require.Equal(t, map[string]int{contract.RetryWorkflowID("artist_stats", "production", p+"2-bad"): 1}, starter.ids(),
				"the bad event alone goes to its retry workflow")
			require.Zero(t, value(r.b.m.outages.WithLabelValues("database")), "a database that answers is no outage")
			require.EqualValues(t, 1, value(r.b.m.failed.WithLabelValues("sql")))
			require.NotEmpty(t, h.logs.Containing("event fails its batch as a whole while the database answers"))
		})
	}
}

// Whether a projection lists an event is decided by the apply, against the
// catalog it applies with, not by a cache that may be a deploy behind: an
// event the cache knows no projection for still reaches the apply.
func TestBridgeKafkaSkipDecidedByTheApply(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	var mu sync.Mutex
	var seen []string
	engine := EngineFunc{
		Pool:            h.pool,
		ProjectionsFunc: func(string) []string { return nil }, // a cache that missed the deploy
		ApplyBatchFunc: func(_ context.Context, evs []event.Envelope) ([]projection.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			var out []projection.Result
			for i, ev := range evs {
				seen = append(seen, ev.EventID)
				if ev.EventType == "TRACK_PLAYED" { // the catalog in the apply's transaction lists it
					out = append(out, projection.Result{Projection: "artist_stats", Index: i, Status: projection.StatusApplied})
				}
			}
			return out, nil
		},
	}
	o := h.plainOptions(newRecordingStarter(nil))
	o.Engine = engine
	r := h.start(o)
	p := h.prefix
	h.produce(envRecord(0, played(p+"1", "artist-1", 1, 1)), envRecord(0, unlisted(p+"2", "e-2")))
	h.waitCommittedToEnd(30 * time.Second)
	mu.Lock()
	require.Equal(t, []string{p + "1", p + "2"}, seen, "every event reaches the apply")
	mu.Unlock()
	require.EqualValues(t, 1, value(r.b.m.applied.WithLabelValues("applied")))
	require.EqualValues(t, 1, value(r.b.m.skipped), "the event no projection listed in the apply is skipped")
}

// refusingStarter refuses, as Temporal does a request it can never accept,
// the start of one event's workflow, and fails every start while down.
type refusingStarter struct {
	*recordingStarter
	refuse string // event ID whose start is refused
	calls  map[string]int
	mu     sync.Mutex
}

func (s *refusingStarter) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	s.mu.Lock()
	s.calls[o.ID]++
	s.mu.Unlock()
	if in, ok := args[0].(contract.RetryInput); ok && in.Event.EventID == s.refuse {
		return nil, serviceerror.NewInvalidArgument("WorkflowId length exceeds limit (test)")
	}
	return s.recordingStarter.ExecuteWorkflow(ctx, o, wf, args...)
}

// A start Temporal refuses (invalid argument) can never succeed: the event
// is dead-lettered as invalid_event at once and the partition moves on. A
// start that fails while Temporal answers its probe is tried a bounded
// number of times, then dead-lettered too; one that fails while the probe
// fails is an outage, retried until Temporal is back.
func TestBridgeKafkaStartErrorsClassified(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true, followersDDL: testenv.FollowersNoFollowedAtDDL})
	p := h.prefix
	s := &refusingStarter{recordingStarter: newRecordingStarter(nil), refuse: p + "f-refused", calls: map[string]int{}}
	var probeDown atomic.Bool
	o := h.plainOptions(s)
	o.MinBackoff, o.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	o.TemporalProbe = func(context.Context) error {
		if probeDown.Load() {
			return errors.New("temporal unreachable (test)")
		}
		return nil
	}
	r := h.start(o)

	h.produce(envRecord(0, followed(p+"f-refused", "user-1", "artist-1")), envRecord(0, played(p+"after", "artist-1", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, 1, h.count(`SELECT count(*) FROM artist_stats`))
	refusedID := contract.RetryWorkflowID("artist_followers", "production", p+"f-refused")
	s.mu.Lock()
	require.Equal(t, 1, s.calls[refusedID], "a refusal is not retried")
	s.mu.Unlock()
	recs := h.dlqRecords(1)
	require.Equal(t, "invalid_event", recs[0].ErrorKind)
	require.Contains(t, recs[0].Error, "temporal refused the retry workflow")
	require.Equal(t, "artist_followers", recs[0].ProjectionName)
	require.Len(t, recs[0].Attempts, 2, "the failed inline attempt 1 and the refusal")
	require.EqualValues(t, 1, total(r.b.m.deadLettered))
	require.EqualValues(t, 1, value(r.b.m.deadLettered.WithLabelValues("artist_followers", "invalid_event")), "counted by projection and error kind")

	// Unavailable while the probe answers: bounded, then dead-lettered.
	s.down.Store(true)
	h.produce(envRecord(0, followed(p+"f-healthy", "user-2", "artist-1")))
	h.waitCommittedToEnd(30 * time.Second)
	require.Len(t, h.dlqRecords(2), 2)
	require.EqualValues(t, maxHealthyStartFailures, s.fails.Load())

	// Unavailable while the probe fails too: an outage, nothing dead-lettered.
	probeDown.Store(true)
	h.produce(envRecord(0, followed(p+"f-outage", "user-3", "artist-1")))
	time.Sleep(2 * time.Second)
	require.Greater(t, int(s.fails.Load()), maxHealthyStartFailures+5, "retried through the outage")
	require.EqualValues(t, 2, total(r.b.m.deadLettered), "an outage dead-letters nothing")
	s.down.Store(false)
	probeDown.Store(false)
	h.waitCommittedToEnd(30 * time.Second)
	require.Contains(t, s.ids(), contract.RetryWorkflowID("artist_followers", "production", p+"f-outage"))
}

// dlqRecords reads the DLQ topic from the start until it holds n records.
func (h *harness) dlqRecords(n int) []dlq.Record {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(h.t, err)
	defer cl.Close()
	var out []dlq.Record
	require.Eventually(h.t, func() bool {
		ctx, cancel := context.WithTimeout(h.ctx, 500*time.Millisecond)
		defer cancel()
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			rec, err := dlq.Decode(r.Value)
			require.NoError(h.t, err)
			out = append(out, rec)
		})
		return len(out) >= n
	}, 30*time.Second, 10*time.Millisecond)
	return out
}

// A record key over dlq.MaxKeyBytes would ride in every workflow input of
// the event: the record is invalid, dead-lettered at once, and the
// partition moves on.
func TestBridgeKafkaOversizedKeyIsInvalid(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	s := newRecordingStarter(nil)
	r := h.start(h.plainOptions(s))
	bad := envRecord(0, played(h.prefix+"big-key", "artist-1", 1, 1))
	bad.Key = []byte(strings.Repeat("k", dlq.MaxKeyBytes+1))
	h.produce(bad, envRecord(0, played(h.prefix+"after", "artist-2", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)
	recs := h.dlqRecords(1)
	require.Equal(t, "invalid_event", recs[0].ErrorKind)
	require.Contains(t, recs[0].Error, "record key is 1025 bytes")
	require.Equal(t, 1, h.count(`SELECT count(*) FROM artist_stats`), "only the event after it applied")
	require.EqualValues(t, 1, total(r.b.m.deadLettered))
	require.Zero(t, s.calls.Load())
}

// staleCatalog is an engine whose cache missed a deploy until it is
// refreshed, and whose batches fail as a whole while the database answers.
type staleCatalog struct {
	EngineFunc
	refreshed atomic.Bool
}

func (s *staleCatalog) Refresh(context.Context) error {
	s.refreshed.Store(true)
	return nil
}

// An event that fails its batch alone is handed to the projections the
// catalog lists now, not to those a cache a deploy behind listed when the
// batch was decoded (which named none: the event would have been
// dead-lettered as matching nothing).
func TestBridgeKafkaLoneFailureUsesTheCurrentCatalog(t *testing.T) {
	h := newHarness(t, harnessOptions{partitions: 1, noTemporal: true})
	engine := &staleCatalog{}
	engine.EngineFunc = EngineFunc{
		Pool: h.pool,
		ProjectionsFunc: func(string) []string {
			if engine.refreshed.Load() {
				return []string{"artist_stats"}
			}
			return nil
		},
		ApplyBatchFunc: func(context.Context, []event.Envelope) ([]projection.Result, error) {
			return nil, errors.New("batch refused as a whole")
		},
	}
	starter := newRecordingStarter(nil)
	o := h.plainOptions(starter)
	o.Engine = engine
	r := h.start(o)
	h.produce(envRecord(0, played(h.prefix+"1", "artist-1", 1, 1)))
	h.waitCommittedToEnd(30 * time.Second)
	require.Equal(t, map[string]int{contract.RetryWorkflowID("artist_stats", "production", h.prefix+"1"): 1}, starter.ids(),
		"handed to the projection deployed since")
	require.Zero(t, total(r.b.m.deadLettered), "not dead-lettered as matching nothing")
}
