package incident

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
)

// The registry is a bridge's view of incidents (CONTRACT §12). A failure
// fingerprint that reaches the threshold of distinct events within the
// window opens one ProjectionIncidentWorkflow. Under policy dead-letter
// every event keeps its own schedule and the incident reports them once.
// Under policy hold the bridge parks the fingerprint's failures (package
// parking) with the incident as their key's head, and the registry tells it
// which failures belong to a holding incident; it reads every bridge's
// holding incidents from the store, and reports the events it parked or
// counted to their workflows every RefreshInterval.

// Client is what the registry needs of Temporal; a client.Client is one.
type Client interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID string, signalName string, signalArg any, options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	SignalWorkflow(ctx context.Context, workflowID string, runID string, signalName string, arg any) error
	DescribeWorkflow(ctx context.Context, workflowID, runID string) (*client.WorkflowExecutionDescription, error)
}

// LivenessInterval is how often the registry checks that each incident
// whose row holds or releases events has a running workflow: one that
// ended (its history failed, an operator terminated it) is started again
// from the row, so a hold never stalls without a workflow to end it.
const LivenessInterval = 30 * time.Second

// RefreshInterval is how often the registry reads the incidents' states,
// reports their events and looks for IR deploys.
const RefreshInterval = 2 * time.Second

// DefaultReportInterval is how often, at most, an incident's workflow is
// told of new failing events: its history grows by a signal per report, so
// counts are batched rather than sent at every refresh. The first report,
// a deploy, and a report that takes the held events to
// CAUSET_INCIDENT_MAX_HELD go at once.
const DefaultReportInterval = 30 * time.Second

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	Incidents config.Incidents
	// Retry is the schedule an incident's probe follows.
	Retry     config.Retry
	Store     *Store
	Client    Client
	TaskQueue string
	// Timeout bounds each call to PostgreSQL or Temporal.
	Timeout time.Duration
	// ReportInterval: see DefaultReportInterval (zero: the default).
	ReportInterval time.Duration
	// IRVersion is a projection's deployed IR version (nil: always 0); a
	// new version asks a held incident for a probe at once.
	IRVersion  func(projection string) int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Metrics are the registry's Prometheus collectors.
type Metrics struct {
	// Opened counts the incidents this bridge opened, by projection and policy.
	Opened *prometheus.CounterVec
	// Events counts (projection, event) pairs of incidents by result:
	// parked, released, dead_lettered.
	Events *prometheus.CounterVec
	// Active is the number of incidents open or holding this bridge knows of.
	Active prometheus.GaugeFunc
}

// Registry is the incidents one bridge knows of.
type Registry struct {
	o   RegistryOptions
	det *Detector

	mu        sync.Mutex
	byFP      map[string]*known // fingerprint ID → incident
	lastAlive time.Time         // the last liveness check
	// instance and reports make each report's key: unique to this
	// registry, counted up.
	instance string
	reports  uint64

	Metrics Metrics
}

// known is an incident this bridge parks or reports events for.
type known struct {
	id      string
	in      contract.IncidentInput
	state   contract.IncidentState
	started bool // its workflow exists (this bridge started or signalled it)
	pending contract.IncidentFailures
	// lastFailure is when the bridge last saw the fingerprint fail; an
	// open (dead-letter) incident quiet for a window is forgotten here.
	lastFailure time.Time
	irVersion   int
	// lastReport is when counts were last signalled; reportedHeld the held
	// events signalled so far (against CAUSET_INCIDENT_MAX_HELD).
	lastReport   time.Time
	reportedHeld int
	// restart is the input of a new run, for an incident whose row holds
	// events while its workflow has ended.
	restart *contract.IncidentInput
	// unsent is a report whose signal failed: it is sent again as it was,
	// with its key, so that a run that did get it counts it once.
	unsent *contract.IncidentFailures
}

// NewRegistry returns the registry of o; nil (incidents off) when the
// threshold is 0. A nil registry holds nothing and counts nothing.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Incidents.Threshold == 0 {
		return nil
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultReportInterval
	}
	ns, sub := "causet", "bridge"
	r := &Registry{
		o: o, det: NewDetector(o.Incidents.Threshold, o.Incidents.Window),
		byFP: map[string]*known{}, instance: rand.Text()[:12],
	}
	r.Metrics = Metrics{
		Opened: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "incidents_opened_total",
			Help: "Incidents this bridge opened, by projection and policy."}, []string{"projection", "policy"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "incident_events_total",
			Help: "(projection, event) pairs of open incidents: parked (hold), released (applied after the incident), dead_lettered (after dead-letter-all)."}, []string{"projection", "result"}),
		Active: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "incidents_active",
			Help: "Incidents open or holding that this bridge knows of (its own and, under hold, every bridge's)."}, r.countActive),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.Metrics.Opened, r.Metrics.Events, r.Metrics.Active)
	}
	return r
}

func (r *Registry) countActive() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.byFP {
		if k.state == contract.IncidentOpen || k.state == contract.IncidentHolding {
			n++
		}
	}
	return float64(n)
}

// Holding reports whether the policy is hold.
func (r *Registry) Holding() bool { return r != nil && r.o.Incidents.Policy == config.IncidentHold }

// Failure is one failed attempt 1 of a (projection, event) pair.
type Failure struct {
	Projection string
	Kind       string
	Err        error
	Event      *event.Envelope
}

func (f Failure) fingerprint() Fingerprint { return Of(f.Projection, f.Kind, f.Err) }

// HeldBy returns the holding incident f's fingerprint belongs to, or, when
// f makes its fingerprint reach the threshold, the input of the incident to
// open (the caller opens it with Open, then reports it with Opened).
// Neither: the event takes the normal path. An open (dead-letter) incident
// counts f among its events.
func (r *Registry) HeldBy(f Failure, now time.Time) (string, *contract.IncidentInput) {
	fp := f.fingerprint()
	r.mu.Lock()
	if k := r.byFP[fp.ID]; k != nil {
		defer r.mu.Unlock()
		k.lastFailure = now
		switch k.state {
		case contract.IncidentHolding:
			return k.id, nil
		case contract.IncidentOpen:
			k.pending.Events++
			k.addSample(f.Event.EventID)
		}
		return "", nil // releasing: the fingerprint takes the normal path until it settles
	}
	r.mu.Unlock()
	if !r.det.Observe(fp.ID, f.Event.EventID, now) {
		return "", nil
	}
	in := contract.IncidentInput{
		Projection: f.Projection, Fingerprint: fp.ID, Policy: r.o.Incidents.Policy, ErrorKind: fp.Kind, SQLState: fp.SQLState,
		Error: errString(f.Err), Pattern: fp.Pattern, Sample: *f.Event, Retry: r.o.Retry,
		HoldMax: r.o.Incidents.HoldMax, MaxHeld: r.o.Incidents.MaxHeld, QuietClose: 10 * r.o.Incidents.Window,
	}
	return "", &in
}

// Note counts a failure handed off the normal way towards its
// fingerprint's incident, opening the incident when it reaches the
// threshold (policy dead-letter; under hold the batch's transaction opens
// and counts them).
func (r *Registry) Note(f Failure, now time.Time) {
	if r == nil || r.Holding() {
		return
	}
	if _, open := r.HeldBy(f, now); open != nil {
		r.Opened(*open)
	}
}

// HoldingOf is the holding incident a failure's fingerprint belongs to,
// "" when none (or not under policy hold); it counts nothing.
func (r *Registry) HoldingOf(f Failure) string {
	if !r.Holding() {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.byFP[f.fingerprint().ID]; k != nil && k.state == contract.IncidentHolding {
		return k.id
	}
	return ""
}

func (k *known) addSample(id string) {
	if len(k.pending.EventIDs) < contract.MaxIncidentSamples {
		k.pending.EventIDs = append(k.pending.EventIDs, id)
	}
}

// Open records, in the batch's transaction, the incident a failure opens;
// false when the incident is releasing (the failure then takes the normal
// path).
func (r *Registry) Open(ctx context.Context, tx pgx.Tx, in contract.IncidentInput) (bool, error) {
	return r.o.Store.Open(ctx, tx, in)
}

// Opened registers an incident whose opening committed (its row, under
// hold); its workflow starts with the next report.
func (r *Registry) Opened(in contract.IncidentInput) {
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)
	state := contract.IncidentOpen
	if in.Policy == config.IncidentHold {
		state = contract.IncidentHolding
	}
	r.mu.Lock()
	k := r.byFP[in.Fingerprint]
	fresh := k == nil
	if fresh {
		k = &known{id: id, in: in, state: state, lastFailure: time.Now(), irVersion: r.irVersion(in.Projection)}
		k.pending.Events = r.o.Incidents.Threshold - 1
		r.byFP[in.Fingerprint] = k
	}
	if in.Policy != config.IncidentHold {
		// Under hold the event is counted with the batch's parked ones.
		k.pending.Events++
		k.addSample(in.Sample.EventID)
	}
	r.mu.Unlock()
	r.det.Forget(in.Fingerprint)
	if fresh {
		r.Metrics.Opened.WithLabelValues(in.Projection, string(in.Policy)).Inc()
		r.o.Logger.Error("projection_incident_opened", "event", "projection_incident_opened", "incidentId", id,
			"projectionName", in.Projection, "fingerprint", in.Fingerprint, "errorKind", in.ErrorKind, "sqlState", in.SQLState,
			"error", in.Error, "policy", string(in.Policy), "threshold", r.o.Incidents.Threshold, "window", r.o.Incidents.Window.String())
	}
}

// CountHeld reports parked events of holding incident id: failed of them
// failed with its fingerprint, held are later events of their keys.
func (r *Registry) CountHeld(id string, projectionName string, failed, held int, eventIDs []string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	for _, k := range r.byFP {
		if k.id == id {
			k.pending.Events += failed
			k.pending.Held += failed + held
			for _, e := range eventIDs {
				k.addSample(e)
			}
		}
	}
	r.mu.Unlock()
	r.Metrics.Events.WithLabelValues(projectionName, "parked").Add(float64(failed + held))
}

// CountReleased reports n parked events of an incident applied once it ended.
func (r *Registry) CountReleased(projectionName string, n int) {
	if r == nil || n == 0 {
		return
	}
	r.Metrics.Events.WithLabelValues(projectionName, "released").Add(float64(n))
}

// CountDeadLettered reports a parked event of an incident dead-lettered
// with it.
func (r *Registry) CountDeadLettered(projectionName string) {
	if r == nil {
		return
	}
	r.Metrics.Events.WithLabelValues(projectionName, "dead_lettered").Inc()
}

// Run refreshes and reports every RefreshInterval until ctx ends, then
// reports what it counted since the last report.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), r.o.Timeout)
			r.flush(last)
			cancel()
			return
		case <-t.C:
		}
		r.refresh(ctx)
		r.flush(ctx)
	}
}

// refresh reads the states of the holding incidents (every bridge's), and
// forgets open incidents that have been quiet for a window.
func (r *Registry) refresh(parent context.Context) {
	now := time.Now()
	if !r.Holding() {
		r.mu.Lock()
		for fp, k := range r.byFP {
			if now.Sub(k.lastFailure) > r.o.Incidents.Window {
				delete(r.byFP, fp)
			}
		}
		r.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(parent, r.o.Timeout)
	defer cancel()
	active, err := r.o.Store.Active(ctx)
	if err != nil {
		r.o.Logger.Debug("cannot read incidents, next refresh retries", "error", err.Error())
		return
	}
	r.mu.Lock()
	unstarted := map[string]bool{}
	for _, k := range r.byFP {
		if !k.started {
			unstarted[k.id] = true
		}
	}
	r.mu.Unlock()
	ended := r.endedWorkflows(ctx, active, unstarted)
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, row := range active {
		seen[row.Input.Fingerprint] = true
		k := r.byFP[row.Input.Fingerprint]
		if k == nil {
			k = &known{id: row.ID, in: row.Input, irVersion: r.irVersion(row.Input.Projection)}
			r.byFP[row.Input.Fingerprint] = k
			if row.State == contract.IncidentHolding {
				// Should its first report find no run, the run it starts goes
				// on from the row: its opening time and counts.
				in := row.RestartInput(now)
				k.restart = &in
			}
		}
		k.state = row.State
		if ended[row.ID] {
			in := row.RestartInput(now)
			k.restart, k.started = &in, false
		}
	}
	for fp := range r.byFP {
		if !seen[fp] {
			delete(r.byFP, fp)
			r.det.Forget(fp)
		}
	}
}

// endedWorkflows reports, every LivenessInterval, which of the active rows'
// incidents have no running workflow. Rows this bridge has opened but not
// yet started a run for (unstarted) are left to the next flush.
func (r *Registry) endedWorkflows(ctx context.Context, active []Row, unstarted map[string]bool) map[string]bool {
	if time.Since(r.lastAlive) < LivenessInterval || len(active) == 0 {
		return nil
	}
	r.lastAlive = time.Now()
	ended := map[string]bool{}
	for _, row := range active {
		if unstarted[row.ID] {
			continue
		}
		d, err := r.o.Client.DescribeWorkflow(ctx, row.ID, "")
		switch {
		case isNotFound(err):
		case err != nil:
			continue // asked again at the next check
		case d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		}
		ended[row.ID] = true
		r.o.Logger.Warn("incident holds events but its workflow has ended: starting a new run from its row",
			"event", "projection_incident_restarted", "incidentId", row.ID, "state", string(row.State))
	}
	return ended
}

// flush starts the workflows of incidents not yet known to exist and
// signals the events reported since the last flush; a new IR version of
// the projection asks for a probe at once.
func (r *Registry) flush(parent context.Context) {
	type send struct {
		k         *known
		f         contract.IncidentFailures
		start     bool
		deployed  bool
		irVersion int
	}
	var sends []send
	r.mu.Lock()
	now := time.Now().UTC()
	for _, k := range r.byFP {
		if k.state != contract.IncidentOpen && k.state != contract.IncidentHolding && k.restart == nil {
			continue
		}
		s := send{k: k, start: !k.started}
		if v := r.irVersion(k.in.Projection); v != k.irVersion {
			s.deployed, s.irVersion = true, v
		}
		counts := k.pending.Events > 0 || k.pending.Held > 0
		switch {
		case k.unsent != nil:
			// The report that failed goes first, as it was; the counts since
			// wait for the next flush.
			s.f = *k.unsent
		case s.start || counts && (s.deployed || r.reportDue(k, now)):
			s.f = k.pending
			s.f.At = now
			r.reports++
			s.f.Key = fmt.Sprintf("%s/%d", r.instance, r.reports)
			k.pending = contract.IncidentFailures{}
			if s.f.Events > 0 || s.f.Held > 0 {
				k.lastReport = now
				k.reportedHeld += s.f.Held
			}
		}
		if s.start || s.f.Events > 0 || s.f.Held > 0 || s.deployed {
			sends = append(sends, s)
		}
	}
	r.mu.Unlock()
	for _, s := range sends {
		ctx, cancel := context.WithTimeout(parent, r.o.Timeout)
		var err error
		if s.start || s.f.Events > 0 || s.f.Held > 0 {
			err = r.signal(ctx, s.k, s.f, s.start)
		}
		var deployErr error
		if err == nil && s.deployed {
			// Its failure only asks for the probe again at the next flush:
			// the report above was delivered and is not sent again.
			deployErr = r.o.Client.SignalWorkflow(ctx, s.k.id, "", contract.SignalDeployed, nil)
		}
		if err == nil && r.Holding() && (s.f.Events > 0 || s.f.Held > 0) {
			// Kept in the row for a restarted run; a failure here loses
			// only that.
			if cerr := r.o.Store.AddCounts(ctx, s.k.id, s.f.Events, s.f.Held); cerr != nil {
				r.o.Logger.Debug("cannot record an incident's counts", "incidentId", s.k.id, "error", cerr.Error())
			}
		}
		cancel()
		r.mu.Lock()
		switch {
		case err == nil:
			s.k.started = true
			s.k.unsent = nil
			if s.deployed && deployErr == nil {
				s.k.irVersion = s.irVersion
			}
		case isNotFound(err) && s.k.state == contract.IncidentOpen:
			// Closed: its next failures count towards a new incident.
			if r.byFP[s.k.in.Fingerprint] == s.k {
				delete(r.byFP, s.k.in.Fingerprint)
			}
		default:
			// Sent again, with its key, at the next flush.
			if s.f.Key != "" {
				f := s.f
				s.k.unsent = &f
			}
			s.k.started = s.k.started && !s.start
			r.o.Logger.Debug("cannot signal incident, next flush retries", "incidentId", s.k.id, "error", err.Error())
		}
		r.mu.Unlock()
	}
}

// reportDue reports whether k's pending counts go now: a report interval
// has passed since the last, or they take its held events to the bound.
func (r *Registry) reportDue(k *known, now time.Time) bool {
	if now.Sub(k.lastReport) >= r.o.ReportInterval {
		return true
	}
	maxHeld := r.o.Incidents.MaxHeld
	return maxHeld > 0 && k.reportedHeld+k.pending.Held >= maxHeld
}

func (r *Registry) signal(ctx context.Context, k *known, f contract.IncidentFailures, start bool) error {
	c := r.o.Client
	if !start {
		return c.SignalWorkflow(ctx, k.id, "", contract.SignalIncidentFailures, f)
	}
	in := k.in
	if k.restart != nil {
		in = *k.restart
	}
	_, err := SignalWithStart(ctx, c, r.o.TaskQueue, k.id, k.state, in, contract.SignalIncidentFailures, f)
	if err == nil {
		k.restart = nil
	}
	return err
}

// SignalWithStart signals incident id's workflow, starting a run with in
// first if none is running (a closed run is replaced).
func SignalWithStart(ctx context.Context, c interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID string, signalName string, signalArg any, options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
}, taskQueue, id string, state contract.IncidentState, in contract.IncidentInput, signal string, arg any) (client.WorkflowRun, error) {
	return c.SignalWithStartWorkflow(ctx, id, signal, arg, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: contract.IncidentSearchAttributes(in.Projection, state),
		StaticSummary:         in.Summary(),
		StaticDetails:         in.Details(),
	}, contract.IncidentWorkflowName, in)
}

func (r *Registry) irVersion(projection string) int {
	if r.o.IRVersion == nil {
		return 0
	}
	return r.o.IRVersion(projection)
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
