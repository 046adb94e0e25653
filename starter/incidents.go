package starter

import (
	"context"
	"errors"
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
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/projection"
)

// Incidents (CONTRACT §12): a failure fingerprint that reaches the
// threshold of distinct events within the window opens one
// ProjectionIncidentWorkflow. Under policy dead-letter every event keeps
// its own schedule and the incident reports them once. Under policy hold
// (inline, entity ordering) the bridge parks the fingerprint's failures in
// causet_parked_events, in the batch's own transaction, and blocks their
// keys with the incident as head, so their keys' later events are parked
// behind them; once the incident's row leaves holding, the sweep applies
// (or, after dead-letter-all, dead-letters) each key's parked events in
// order and unblocks the key. An event that fails again then becomes its
// key's head as any failure does, and the rest of the key waits for it.

// IncidentClient is what the bridge needs of Temporal for incidents; a
// client.Client is one.
type IncidentClient interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID string, signalName string, signalArg any, options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	SignalWorkflow(ctx context.Context, workflowID string, runID string, signalName string, arg any) error
}

// incidentInterval is how often the bridge reads the incidents' states,
// reports their events and looks for IR deploys.
const incidentInterval = 2 * time.Second

// knownIncident is an incident this bridge parks or reports events for.
type knownIncident struct {
	id      string
	in      contract.IncidentInput
	state   contract.IncidentState
	started bool // its workflow exists (this bridge started or signalled it)
	pending contract.IncidentFailures
	// lastFailure is when the bridge last saw the fingerprint fail; an
	// open (dead-letter) incident quiet for a window is forgotten here.
	lastFailure time.Time
	irVersion   int
}

type incidents struct {
	b   *Bridge
	cfg config.Incidents
	det *incident.Detector

	mu   sync.Mutex
	byFP map[string]*knownIncident // fingerprint ID → incident

	opened *prometheus.CounterVec
	parked *prometheus.CounterVec
	active prometheus.GaugeFunc
}

func newIncidents(b *Bridge) *incidents {
	cfg := b.opts.Incidents
	if cfg.Threshold == 0 {
		return nil
	}
	ns, sub := "causet", "bridge"
	inc := &incidents{
		b: b, cfg: cfg, det: incident.NewDetector(cfg.Threshold, cfg.Window),
		byFP: map[string]*knownIncident{},
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "incidents_opened_total",
			Help: "Incidents this bridge opened, by projection and policy."}, []string{"projection", "policy"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "incident_events_total",
			Help: "(projection, event) pairs of open incidents: parked (hold), released (applied after the incident), dead_lettered (after dead-letter-all)."}, []string{"projection", "result"}),
	}
	inc.active = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "incidents_active",
		Help: "Incidents open or holding that this bridge knows of (its own and, under hold, every bridge's)."}, inc.countActive)
	if b.opts.Registerer != nil {
		b.opts.Registerer.MustRegister(inc.opened, inc.parked, inc.active)
	}
	return inc
}

func (inc *incidents) countActive() float64 {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	n := 0
	for _, k := range inc.byFP {
		if k.state == contract.IncidentOpen || k.state == contract.IncidentHolding {
			n++
		}
	}
	return float64(n)
}

func (inc *incidents) holding() bool { return inc != nil && inc.cfg.Policy == config.IncidentHold }

// failure is one failed attempt 1 the bridge classifies.
type failure struct {
	projection string
	result     projection.Result
	env        *event.Envelope
}

// heldBy returns the holding incident f's fingerprint belongs to, or, when
// f makes its fingerprint reach the threshold, the input of the incident to
// open (the caller opens it). Neither: the event takes the normal path. An
// open (dead-letter) incident counts f among its events.
func (inc *incidents) heldBy(f failure, now time.Time) (string, *contract.IncidentInput) {
	fp := incident.Of(f.projection, kindOf(f.result), errOf(f.result))
	inc.mu.Lock()
	if k := inc.byFP[fp.ID]; k != nil {
		defer inc.mu.Unlock()
		k.lastFailure = now
		switch k.state {
		case contract.IncidentHolding:
			return k.id, nil
		case contract.IncidentOpen:
			k.pending.Events++
			k.addSample(f.result.EventID)
		}
		return "", nil // releasing: the fingerprint takes the normal path until it settles
	}
	inc.mu.Unlock()
	if !inc.det.Observe(fp.ID, f.result.EventID, now) {
		return "", nil
	}
	in := contract.IncidentInput{
		Projection: f.projection, Fingerprint: fp.ID, Policy: inc.cfg.Policy, ErrorKind: fp.Kind, SQLState: fp.SQLState,
		Error: errString(errOf(f.result)), Pattern: fp.Pattern, Sample: *f.env, Retry: inc.b.opts.Retry,
		HoldMax: inc.cfg.HoldMax, MaxHeld: inc.cfg.MaxHeld, QuietClose: 10 * inc.cfg.Window,
	}
	return "", &in
}

// holdingOf is the holding incident a failed pair's fingerprint belongs
// to, "" when none (or not under policy hold); it counts nothing.
func (inc *incidents) holdingOf(o projection.Result) string {
	if !inc.holding() || o.Status != projection.StatusFailed {
		return ""
	}
	return inc.holdingID(incident.Of(o.Projection, kindOf(o), errOf(o)).ID)
}

// holdingID is the holding incident of fingerprint fp, "" when none.
func (inc *incidents) holdingID(fp string) string {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if k := inc.byFP[fp]; k != nil && k.state == contract.IncidentHolding {
		return k.id
	}
	return ""
}

func (k *knownIncident) addSample(id string) {
	if len(k.pending.EventIDs) < contract.MaxIncidentSamples {
		k.pending.EventIDs = append(k.pending.EventIDs, id)
	}
}

// opened registers an incident whose opening committed (its row, under
// hold) and starts its workflow.
func (inc *incidents) openedIncident(in contract.IncidentInput) {
	id := contract.IncidentWorkflowID(in.Projection, in.Fingerprint)
	state := contract.IncidentOpen
	if in.Policy == config.IncidentHold {
		state = contract.IncidentHolding
	}
	inc.mu.Lock()
	k := inc.byFP[in.Fingerprint]
	fresh := k == nil
	if fresh {
		k = &knownIncident{id: id, in: in, state: state, lastFailure: time.Now(), irVersion: inc.b.irVersion(in.Projection)}
		k.pending.Events = inc.cfg.Threshold - 1
		inc.byFP[in.Fingerprint] = k
	}
	if in.Policy != config.IncidentHold {
		// Under hold the event is counted with the batch's parked ones.
		k.pending.Events++
		k.addSample(in.Sample.EventID)
	}
	inc.mu.Unlock()
	inc.det.Forget(in.Fingerprint)
	if fresh {
		inc.opened.WithLabelValues(in.Projection, string(in.Policy)).Inc()
		inc.b.log.Error("projection_incident_opened", "event", "projection_incident_opened", "incidentId", id,
			"projectionName", in.Projection, "fingerprint", in.Fingerprint, "errorKind", in.ErrorKind, "sqlState", in.SQLState,
			"error", in.Error, "policy", string(in.Policy), "threshold", inc.cfg.Threshold, "window", inc.cfg.Window.String())
	}
}

// countHeld reports parked events of a holding incident.
func (inc *incidents) countHeld(id string, projectionName string, failed, held int, eventIDs []string) {
	inc.mu.Lock()
	for _, k := range inc.byFP {
		if k.id == id {
			k.pending.Events += failed
			k.pending.Held += failed + held
			for _, e := range eventIDs {
				k.addSample(e)
			}
		}
	}
	inc.mu.Unlock()
	inc.parked.WithLabelValues(projectionName, "parked").Add(float64(failed + held))
}

// countReleased reports parked events of an incident applied once it ended.
func (inc *incidents) countReleased(projectionName string, n int) {
	if inc == nil || n == 0 {
		return
	}
	inc.parked.WithLabelValues(projectionName, "released").Add(float64(n))
}

// run refreshes, reports and settles until the bridge stops.
func (inc *incidents) run() {
	b := inc.b
	defer b.wg.Done()
	t := time.NewTicker(incidentInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			// A bridge that stops reports what it counted since the last flush.
			ctx, cancel := context.WithTimeout(context.Background(), b.opts.StartTimeout)
			inc.flush(ctx)
			cancel()
			return
		case <-t.C:
		}
		inc.refresh()
		inc.flush(b.ctx)
	}
}

// refresh reads the states of the holding incidents (every bridge's), and
// forgets open incidents that have been quiet for a window.
func (inc *incidents) refresh() {
	b := inc.b
	now := time.Now()
	if !inc.holding() {
		inc.mu.Lock()
		for fp, k := range inc.byFP {
			if now.Sub(k.lastFailure) > inc.cfg.Window {
				delete(inc.byFP, fp)
			}
		}
		inc.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.StartTimeout)
	defer cancel()
	active, err := b.opts.IncidentStore.Active(ctx)
	if err != nil {
		b.log.Debug("cannot read incidents, next refresh retries", "error", err.Error())
		return
	}
	inc.mu.Lock()
	defer inc.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range active {
		seen[r.Input.Fingerprint] = true
		k := inc.byFP[r.Input.Fingerprint]
		if k == nil {
			k = &knownIncident{id: r.ID, in: r.Input, irVersion: b.irVersion(r.Input.Projection)}
			inc.byFP[r.Input.Fingerprint] = k
		}
		k.state = r.State
	}
	for fp := range inc.byFP {
		if !seen[fp] {
			delete(inc.byFP, fp)
			inc.det.Forget(fp)
		}
	}
}

// flush starts the workflows of incidents not yet known to exist and
// signals the events reported since the last flush; a new IR version of
// the projection asks for a probe at once.
func (inc *incidents) flush(parent context.Context) {
	b := inc.b
	type send struct {
		k         *knownIncident
		f         contract.IncidentFailures
		start     bool
		deployed  bool
		irVersion int
	}
	var sends []send
	inc.mu.Lock()
	now := time.Now().UTC()
	for _, k := range inc.byFP {
		if k.state != contract.IncidentOpen && k.state != contract.IncidentHolding {
			continue
		}
		s := send{k: k, start: !k.started}
		if k.pending.Events > 0 || k.pending.Held > 0 || s.start {
			s.f = k.pending
			s.f.At = now
			k.pending = contract.IncidentFailures{}
		}
		if v := b.irVersion(k.in.Projection); v != k.irVersion {
			s.deployed, s.irVersion = true, v
		}
		if s.start || s.f.Events > 0 || s.f.Held > 0 || s.deployed {
			sends = append(sends, s)
		}
	}
	inc.mu.Unlock()
	for _, s := range sends {
		ctx, cancel := context.WithTimeout(parent, b.opts.StartTimeout)
		err := inc.signal(ctx, s.k, s.f, s.start)
		if err == nil && s.deployed {
			err = b.opts.IncidentClient.SignalWorkflow(ctx, s.k.id, "", contract.SignalDeployed, nil)
		}
		cancel()
		inc.mu.Lock()
		switch {
		case err == nil:
			s.k.started = true
			if s.deployed {
				s.k.irVersion = s.irVersion
			}
		case isNotFound(err) && s.k.state == contract.IncidentOpen:
			// Closed: its next failures count towards a new incident.
			if inc.byFP[s.k.in.Fingerprint] == s.k {
				delete(inc.byFP, s.k.in.Fingerprint)
			}
		default:
			// Reported again with the next flush.
			s.k.pending.Events += s.f.Events
			s.k.pending.Held += s.f.Held
			s.k.started = s.k.started && !s.start
			b.log.Debug("cannot signal incident, next flush retries", "incidentId", s.k.id, "error", err.Error())
		}
		inc.mu.Unlock()
	}
}

func (inc *incidents) signal(ctx context.Context, k *knownIncident, f contract.IncidentFailures, start bool) error {
	c := inc.b.opts.IncidentClient
	if !start {
		return c.SignalWorkflow(ctx, k.id, "", contract.SignalIncidentFailures, f)
	}
	_, err := c.SignalWithStartWorkflow(ctx, k.id, contract.SignalIncidentFailures, f, client.StartWorkflowOptions{
		ID:                    k.id,
		TaskQueue:             inc.b.opts.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: contract.IncidentSearchAttributes(k.in.Projection, k.state),
	}, contract.IncidentWorkflowName, k.in)
	return err
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// openInTx records, in the batch's transaction, the incident a failure
// opens; false when the incident is releasing (the failure then takes the
// normal path).
func (inc *incidents) openInTx(ctx context.Context, tx pgx.Tx, in contract.IncidentInput) (bool, error) {
	return inc.b.opts.IncidentStore.Open(ctx, tx, in)
}

// irVersion is the projection's IR version in the engine's cache, 0 when
// the engine does not say.
func (b *Bridge) irVersion(projection string) int {
	if v, ok := b.opts.Engine.(interface{ Version(string) int }); ok {
		return v.Version(projection)
	}
	return 0
}

// noteFailure counts a failure handed off the normal way towards its
// fingerprint's incident (policy dead-letter; under hold, the batch's
// transaction counts them).
func (p *partition) noteFailure(o projection.Result, env *event.Envelope) {
	inc := p.b.inc
	if inc == nil || inc.holding() {
		return
	}
	if _, open := inc.heldBy(failure{o.Projection, o, env}, time.Now()); open != nil {
		inc.openedIncident(*open)
	}
}
