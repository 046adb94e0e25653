package incident_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/internal/testenv"
)

// recordingClient records the registry's starts and signals.
type recordingClient struct {
	mu      sync.Mutex
	starts  []contract.IncidentInput
	reports []contract.IncidentFailures
}

func (c *recordingClient) SignalWithStartWorkflow(_ context.Context, _ string, _ string, arg any, _ client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts = append(c.starts, args[0].(contract.IncidentInput))
	c.reports = append(c.reports, arg.(contract.IncidentFailures))
	return nil, nil
}

func (c *recordingClient) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	return nil, serviceerror.NewNotFound("no such workflow")
}

func (c *recordingClient) SignalWorkflow(_ context.Context, _ string, _ string, _ string, arg any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := arg.(contract.IncidentFailures); ok {
		c.reports = append(c.reports, f)
	}
	return nil
}

func TestNilRegistryHoldsAndCountsNothing(t *testing.T) {
	r := incident.NewRegistry(incident.RegistryOptions{})
	require.Nil(t, r, "threshold 0: incidents off")
	require.False(t, r.Holding())
	ev := &event.Envelope{EventID: "e1"}
	require.Empty(t, r.HoldingOf(incident.Failure{Projection: "p", Kind: "sql", Event: ev}))
	r.Note(incident.Failure{Projection: "p", Kind: "sql", Event: ev}, time.Now())
	r.CountHeld("id", "p", 1, 1, nil)
	r.CountReleased("p", 1)
	r.CountDeadLettered("p")
}

// Under policy dead-letter the threshold's failure opens the incident,
// which reports the events it saw once its workflow starts.
func TestRegistryOpensAtThresholdAndReports(t *testing.T) {
	c := &recordingClient{}
	reg := prometheus.NewRegistry()
	r := incident.NewRegistry(incident.RegistryOptions{
		Incidents: config.Incidents{Threshold: 3, Window: time.Minute, Policy: config.IncidentDeadLetter},
		Client:    c, TaskQueue: "q", Timeout: time.Second, Registerer: reg,
	})
	err := &pgconn.PgError{Code: "42703", Message: `column "x" does not exist`}
	now := time.Now()
	for i := range 5 {
		r.Note(incident.Failure{Projection: "p", Kind: "sql", Err: err, Event: &event.Envelope{EventID: fmt.Sprintf("e%d", i)}}, now)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(r.Metrics.Opened.WithLabelValues("p", "dead-letter")))
	require.Equal(t, 1.0, testutil.ToFloat64(r.Metrics.Active))
	require.Empty(t, r.HoldingOf(incident.Failure{Projection: "p", Kind: "sql", Err: err, Event: &event.Envelope{EventID: "e9"}}),
		"an open incident under dead-letter holds nothing")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Run(ctx) // stopped at once: reports what it counted
	require.Len(t, c.starts, 1)
	require.Equal(t, "p", c.starts[0].Projection)
	require.Equal(t, "42703", c.starts[0].SQLState)
	events := 0
	for _, f := range c.reports {
		events += f.Events
	}
	require.Equal(t, 5, events, "the threshold's events and the two after it, each once")
}

// A row holding events whose workflow has ended (its history failed, an
// operator terminated it): the registry starts a new run from the row,
// carrying the time it opened, instead of leaving the hold with nothing to
// end it.
func TestRegistryRestartsAHoldWhoseWorkflowEnded(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opened := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	insertHoldingRow(t, ctx, pool, "00000000000000ab", opened)

	c := &recordingClient{}
	r := incident.NewRegistry(incident.RegistryOptions{
		Incidents: config.Incidents{Threshold: 3, Window: time.Minute, Policy: config.IncidentHold},
		Store:     incident.NewStore(pool), Client: c, TaskQueue: "q", Timeout: 5 * time.Second,
	})
	runCtx, stop := context.WithTimeout(ctx, incident.RefreshInterval+time.Second)
	defer stop()
	r.Run(runCtx)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.starts, 1, "one new run")
	st := c.starts[0].Status
	require.NotNil(t, st)
	require.Equal(t, contract.IncidentHolding, st.State)
	require.True(t, st.FirstSeen.Equal(opened), "first seen %s, want %s", st.FirstSeen, opened)
}

// insertHoldingRow writes a holding incident row of projection p with
// fingerprint fp, opened at opened, and returns its input.
func insertHoldingRow(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fp string, opened time.Time) contract.IncidentInput {
	t.Helper()
	in := contract.IncidentInput{Projection: "p", Fingerprint: fp, Policy: config.IncidentHold, ErrorKind: "sql", Error: "boom"}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO causet_incidents (id, projection, fingerprint, state, input, opened_at) VALUES ($1, $2, $3, 'holding', $4, $5)`,
		contract.IncidentWorkflowID(in.Projection, fp), in.Projection, fp, b, opened)
	require.NoError(t, err)
	return in
}

// describingClient counts the registry's describes; every workflow is
// missing.
type describingClient struct {
	recordingClient
	described []string
}

func (c *describingClient) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.described = append(c.described, id)
	return nil, serviceerror.NewNotFound("no such workflow")
}

// A hold this bridge has just opened has its row before its run: the
// first flush starts the run. A refresh in between does not take the
// missing run for one that ended (it would restart the hold from its row
// and warn of an ended workflow): the run starts from the bridge's own
// input, once.
func TestRegistryLeavesAHoldItOpenedToItsFirstStart(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As the bridge's batch transaction writes it.
	in := insertHoldingRow(t, ctx, pool, "00000000000000ac", time.Now())
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)

	c := &describingClient{}
	r := incident.NewRegistry(incident.RegistryOptions{
		Incidents: config.Incidents{Threshold: 3, Window: time.Minute, Policy: config.IncidentHold},
		Store:     incident.NewStore(pool), Client: c, TaskQueue: "q", Timeout: 5 * time.Second,
	})
	r.Opened(in)
	runCtx, stop := context.WithTimeout(ctx, incident.RefreshInterval+time.Second)
	defer stop()
	r.Run(runCtx)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotContains(t, c.described, id, "a hold whose first start is pending is not described")
	require.Len(t, c.starts, 1, "one run")
	require.Nil(t, c.starts[0].Status, "started from the bridge's input, not restarted from the row")
}

// Counts reach an incident's workflow at most every report interval (each
// signal is history): at once when it opens, then batched, and at once
// again when the events held reach CAUSET_INCIDENT_MAX_HELD.
func TestRegistryBatchesReports(t *testing.T) {
	c := &recordingClient{}
	r := incident.NewRegistry(incident.RegistryOptions{
		Incidents: config.Incidents{Threshold: 3, Window: time.Minute, Policy: config.IncidentDeadLetter, MaxHeld: 10},
		Client:    c, TaskQueue: "q", Timeout: time.Second, ReportInterval: time.Hour,
	})
	err := &pgconn.PgError{Code: "42703", Message: `column "x" does not exist`}
	note := func(i int) {
		r.Note(incident.Failure{Projection: "p", Kind: "sql", Err: err, Event: &event.Envelope{EventID: fmt.Sprintf("e%d", i)}}, time.Now())
	}
	flush := func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r.Run(ctx) // stopped at once: one flush
	}
	for i := range 3 {
		note(i)
	}
	flush()
	require.Len(t, c.reports, 1, "reported at once when it opens")
	require.Equal(t, 3, c.reports[0].Events)

	note(3)
	note(4)
	flush()
	flush()
	require.Len(t, c.reports, 1, "within the interval, new failures wait")

	id := contract.IncidentWorkflowID("p", c.starts[0].Fingerprint)
	r.CountHeld(id, "p", 0, 10, nil)
	flush()
	require.Len(t, c.reports, 2, "at CAUSET_INCIDENT_MAX_HELD at once")
	require.Equal(t, 2, c.reports[1].Events, "with the failures that waited")
	require.Equal(t, 10, c.reports[1].Held)
}

// flakyClient fails the signals it is told to fail, by name, once each.
type flakyClient struct {
	recordingClient
	fail     map[string]int
	deployed int
}

func (c *flakyClient) SignalWorkflow(ctx context.Context, id string, run string, name string, arg any) error {
	c.mu.Lock()
	if c.fail[name] > 0 {
		c.fail[name]--
		c.mu.Unlock()
		return serviceerror.NewUnavailable("the answer was lost")
	}
	if name == contract.SignalDeployed {
		c.deployed++
	}
	c.mu.Unlock()
	return c.recordingClient.SignalWorkflow(ctx, id, run, name, arg)
}

// A report whose signal failed (its answer lost: it may have arrived) is
// sent again as it was, with its key, so that the run counts it once; and
// a deploy signal that fails after its report arrived asks for the probe
// again without sending the report twice.
func TestRegistrySendsAFailedReportAgainWithItsKey(t *testing.T) {
	c := &flakyClient{fail: map[string]int{}}
	version := 1
	r := incident.NewRegistry(incident.RegistryOptions{
		Incidents: config.Incidents{Threshold: 3, Window: time.Minute, Policy: config.IncidentDeadLetter},
		Client:    c, TaskQueue: "q", Timeout: time.Second, ReportInterval: time.Nanosecond,
		IRVersion: func(string) int { return version },
	})
	err := &pgconn.PgError{Code: "42703", Message: `column "x" does not exist`}
	note := func(i int) {
		r.Note(incident.Failure{Projection: "p", Kind: "sql", Err: err, Event: &event.Envelope{EventID: fmt.Sprintf("e%d", i)}}, time.Now())
	}
	flush := func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r.Run(ctx)
	}
	for i := range 3 {
		note(i)
	}
	flush()
	require.Len(t, c.reports, 1)
	first := c.reports[0].Key
	require.NotEmpty(t, first)

	note(3)
	note(4)
	c.fail[contract.SignalIncidentFailures] = 1
	flush()
	require.Len(t, c.reports, 1, "the signal failed")
	note(5)
	flush()
	require.Len(t, c.reports, 2)
	lost := c.reports[1]
	require.Equal(t, 2, lost.Events, "sent again as it was: the failure after it waits")
	require.NotEqual(t, first, lost.Key)
	flush()
	require.Len(t, c.reports, 3)
	require.Equal(t, 1, c.reports[2].Events)
	require.NotEqual(t, lost.Key, c.reports[2].Key, "each report has its own key")

	// A deploy: the report with it arrives, the deploy signal fails.
	version = 2
	note(6)
	c.fail[contract.SignalDeployed] = 1
	flush()
	require.Len(t, c.reports, 4)
	require.Zero(t, c.deployed)
	flush()
	require.Equal(t, 1, c.deployed, "the probe is asked for again")
	require.Len(t, c.reports, 4, "the report is not sent twice")
	total := 0
	for _, f := range c.reports {
		total += f.Events
	}
	require.Equal(t, 7, total, "every failure reported once")
}
