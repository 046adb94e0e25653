package starter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/workflows"
)

// refuseLedgerRowSQL makes the dedupe ledger refuse one event's row: the
// batch's multi-row ledger insert then fails as a whole while the database
// answers, as an event PostgreSQL cannot store would make it.
const refuseLedgerRowSQL = `
CREATE FUNCTION refuse_bad_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.event_id LIKE '%-bad' THEN RAISE EXCEPTION 'ledger refuses %', NEW.event_id; END IF;
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
			starter := newRecordingStarter(nil)
			o := h.options(starter)
			if !ordered {
				o = h.plainOptions(starter)
			}
			r := h.start(o)

			p := h.prefix
			h.produce(
				envRecord(0, played(p+"1", "artist-1", 1, 1)),
				envRecord(0, played(p+"2-bad", "artist-2", 1, 1)),
				envRecord(0, played(p+"3", "artist-3", 1, 1)),
			)
			h.waitCommittedToEnd(60 * time.Second)
			require.Equal(t, 2, h.count(`SELECT count(*) FROM artist_stats`), "the events around the bad one apply")
			require.Equal(t, map[string]int{workflows.RetryWorkflowID("artist_stats", "production", p+"2-bad"): 1}, starter.ids(),
				"the bad event alone goes to its retry workflow")
			require.Zero(t, value(r.b.m.outages.WithLabelValues("database")), "a database that answers is no outage")
			require.EqualValues(t, 1, value(r.b.m.failed.WithLabelValues("sql")))
			require.NotEmpty(t, h.logs.lines("event fails its batch as a whole while the database answers"))
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
		ProjectionsFunc: func(string) []string { return nil }, // a cache that missed the deploy
		ApplyBatchFunc: func(_ context.Context, evs []event.Envelope) ([]Outcome, error) {
			mu.Lock()
			defer mu.Unlock()
			var out []Outcome
			for i, ev := range evs {
				seen = append(seen, ev.EventID)
				if ev.EventType == "TRACK_PLAYED" { // the catalog in the apply's transaction lists it
					out = append(out, Outcome{Projection: "artist_stats", Index: i, Status: StatusApplied})
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
