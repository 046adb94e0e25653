package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/causet/projection-retry/contract"
)

// Lister lists workflow executions by visibility query; client.Client is one.
type Lister interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// DeadLetterMonitorOptions configure NewDeadLetterMonitor.
type DeadLetterMonitorOptions struct {
	// Client lists the open dead letters. Required.
	Client Lister
	// Namespace is the client's namespace. Required.
	Namespace string
	// TaskQueue is CAUSET_TASK_QUEUE: only this deployment's retry
	// workflows are counted. Required.
	TaskQueue string
	// Registerer receives the gauges. Required.
	Registerer prometheus.Registerer
	// Every is the time between scans. Optional, defaults to a minute.
	Every time.Duration
	// Logger gets a line per failed scan. Optional, defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock. Optional, defaults to time.Now.
	Now func() time.Time
	// DataConverter reads the memo, which payload encryption encrypts like
	// any payload. Optional, defaults to the SDK's.
	DataConverter converter.DataConverter
}

// DefaultDeadLetterScanEvery is how often a worker scans the open dead letters.
const DefaultDeadLetterScanEvery = time.Minute

// DeadLetterMonitor exports how many dead-lettered retry workflows are open
// and how long the oldest of them has waited, by projection and error kind.
// A depth gauge alone alarms only when the first dead letter appears; the
// age keeps alarming while one is left unattended.
//
// It scans visibility: SQL visibility (the dev server's SQLite, PostgreSQL,
// MySQL) refuses ORDER BY, so every open dead letter is listed (one page per
// 1,000) and the oldest found here. Each run records when it was
// dead-lettered and with which error kind in its memo, which lists return;
// a run dead-lettered by an older worker has no memo and counts from its
// start, with error kind "unknown".
type DeadLetterMonitor struct {
	o        DeadLetterMonitorOptions
	query    string
	openDesc *prometheus.Desc
	ageDesc  *prometheus.Desc
	scanDesc *prometheus.Desc
	failures prometheus.Counter

	mu      sync.Mutex
	open    map[deadLetterKey]deadLetterGroup
	scanned time.Time
}

type deadLetterKey struct{ projection, kind string }

type deadLetterGroup struct {
	count  int
	oldest time.Time
}

// NewDeadLetterMonitor registers the monitor's metrics on o.Registerer.
func NewDeadLetterMonitor(o DeadLetterMonitorOptions) (*DeadLetterMonitor, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("dead-letter monitor: Client is required")
	case o.Namespace == "":
		return nil, errors.New("dead-letter monitor: Namespace is required")
	case o.TaskQueue == "":
		return nil, errors.New("dead-letter monitor: TaskQueue is required")
	case o.Registerer == nil:
		return nil, errors.New("dead-letter monitor: Registerer is required")
	}
	if o.Every <= 0 {
		o.Every = DefaultDeadLetterScanEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DataConverter == nil {
		o.DataConverter = converter.GetDefaultDataConverter()
	}
	labels := []string{"projection", "error_kind"}
	m := &DeadLetterMonitor{
		o:     o,
		query: DeadLetterQuery(o.TaskQueue),
		openDesc: prometheus.NewDesc("causet_projection_dead_letters_open",
			"Dead-lettered retry workflows still open (waiting for replay or discard), at the last scan.", labels, nil),
		ageDesc: prometheus.NewDesc("causet_projection_dead_letter_oldest_age_seconds",
			"Age of the oldest open dead letter: now minus when it was dead-lettered, as of the last scan.", labels, nil),
		scanDesc: prometheus.NewDesc("causet_projection_dead_letter_scan_timestamp_seconds",
			"When the open dead letters were last scanned successfully (Unix time).", nil, nil),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "causet_projection_dead_letter_scan_failures_total",
			Help: "Scans of the open dead letters that failed; the gauges keep the last scan's values."}),
		open: map[deadLetterKey]deadLetterGroup{},
	}
	if err := o.Registerer.Register(m); err != nil {
		return nil, err
	}
	if err := o.Registerer.Register(m.failures); err != nil {
		return nil, err
	}
	return m, nil
}

// DeadLetterQuery is the visibility query of the open dead letters on
// taskQueue. Closed runs whose replay window expired keep the state
// dead_lettered, hence the status.
func DeadLetterQuery(taskQueue string) string {
	return contract.OpenRetryRunsQuery(taskQueue, contract.StateDeadLettered)
}

// Scan lists the open dead letters and replaces the gauges' values.
func (m *DeadLetterMonitor) Scan(ctx context.Context) error {
	found := map[deadLetterKey]deadLetterGroup{}
	var token []byte
	for {
		resp, err := m.o.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: m.o.Namespace, PageSize: 1000, NextPageToken: token, Query: m.query,
		})
		if err != nil {
			m.failures.Inc()
			return fmt.Errorf("list open dead letters: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			k, at := deadLetterOf(e, m.o.DataConverter)
			g := found[k]
			if g.count == 0 || at.Before(g.oldest) {
				g.oldest = at
			}
			g.count++
			found[k] = g
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	m.mu.Lock()
	m.open, m.scanned = found, m.o.Now()
	m.mu.Unlock()
	return nil
}

// deadLetterOf reads a listed run's projection, error kind and dead-letter
// time; dc reads the memo (search attributes are never encoded).
func deadLetterOf(e *workflowpb.WorkflowExecutionInfo, dc converter.DataConverter) (deadLetterKey, time.Time) {
	k := deadLetterKey{projection: decodeString(converter.GetDefaultDataConverter(), e.GetSearchAttributes().GetIndexedFields()[contract.AttrProjection.GetName()])}
	memo := e.GetMemo().GetFields()
	k.kind = decodeString(dc, memo[contract.MemoErrorKind])
	if k.kind == "" {
		k.kind = "unknown"
	}
	at := e.GetStartTime().AsTime()
	if p := memo[contract.MemoDeadLetteredAt]; p != nil {
		var t time.Time
		if dc.FromPayload(p, &t) == nil && !t.IsZero() {
			at = t
		}
	}
	return k, at
}

func decodeString(dc converter.DataConverter, p *commonpb.Payload) string {
	var s string
	if p == nil || dc.FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// Run scans now and every Every until ctx ends, logging failed scans.
func (m *DeadLetterMonitor) Run(ctx context.Context) {
	tick := time.NewTicker(m.o.Every)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, max(m.o.Every, 30*time.Second))
		err := m.Scan(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			m.o.Logger.Warn("projection_dead_letter_scan_failed", "event", "projection_dead_letter_scan_failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Start runs Run in the background; the returned stop ends it and waits.
func (m *DeadLetterMonitor) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Describe implements prometheus.Collector.
func (m *DeadLetterMonitor) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.openDesc
	ch <- m.ageDesc
	ch <- m.scanDesc
}

// Collect implements prometheus.Collector. The age is taken at scrape time,
// so it grows between scans as the dead letter waits.
func (m *DeadLetterMonitor) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.scanned.IsZero() {
		return
	}
	now := m.o.Now()
	for k, g := range m.open {
		ch <- prometheus.MustNewConstMetric(m.openDesc, prometheus.GaugeValue, float64(g.count), k.projection, k.kind)
		ch <- prometheus.MustNewConstMetric(m.ageDesc, prometheus.GaugeValue, max(now.Sub(g.oldest).Seconds(), 0), k.projection, k.kind)
	}
	ch <- prometheus.MustNewConstMetric(m.scanDesc, prometheus.GaugeValue, float64(m.scanned.UnixNano())/1e9)
}
