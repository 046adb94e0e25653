package bench

// The Temporal server's own figures for a span of the bench, read from its
// Prometheus endpoint before and after: how many workflow starts it served
// and what each cost it (latency, persistence calls, CPU). They show where
// the hand-off's start rate is bounded.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ServerFigures are the Temporal server's figures for the starts of one
// measurement, in the namespace the bench uses.
type ServerFigures struct {
	// Starts is the frontend's StartWorkflowExecution calls.
	Starts float64 `json:"starts"`
	// StartMeanMs is their mean latency at the frontend; StartP50Ms and
	// StartP99Ms are the upper bounds of the latency buckets holding the
	// median and the 99th percentile (-1: above the largest bucket).
	StartMeanMs float64 `json:"startMeanMs"`
	StartP50Ms  float64 `json:"startP50Ms"`
	StartP99Ms  float64 `json:"startP99Ms"`
	// HistoryStartMeanMs is the history service's part of a start.
	HistoryStartMeanMs float64 `json:"historyStartMeanMs"`
	// CreateMeanMs is the mean latency of the persistence write that
	// creates an execution.
	CreateMeanMs float64 `json:"createMeanMs"`
	// PersistenceCallsPerStart and PersistenceMsPerStart are every
	// persistence call the server made in the span (the starts, their first
	// workflow tasks, timers, the server's own work) per start.
	PersistenceCallsPerStart float64 `json:"persistenceCallsPerStart"`
	PersistenceMsPerStart    float64 `json:"persistenceMsPerStart"`
	// CPUMsPerStart is the server process's CPU per start, and StartsPerCore
	// the starts per second one core of it sustains at that cost.
	CPUMsPerStart float64 `json:"cpuMsPerStart"`
	StartsPerCore float64 `json:"startsPerCore"`
}

// serverCounters are the cumulative series ServerFigures are differences
// of.
type serverCounters struct {
	startCount, startSum     float64
	startBuckets             map[float64]float64 // upper bound (s) → cumulative count
	historyCount, historySum float64
	createCount, createSum   float64
	persistCalls, persistSum float64
}

// scrapeServers reads every endpoint of the server (a cluster's services
// each have one) and sums their series: the sums are what one process
// running every service reports.
func scrapeServers(ctx context.Context, urls []string, namespace string) (serverCounters, error) {
	sum := serverCounters{startBuckets: map[float64]float64{}}
	for _, url := range urls {
		c, err := scrapeServer(ctx, url, namespace)
		if err != nil {
			return serverCounters{}, err
		}
		sum.add(c)
	}
	return sum, nil
}

func (c *serverCounters) add(o serverCounters) {
	c.startCount += o.startCount
	c.startSum += o.startSum
	for ub, n := range o.startBuckets {
		c.startBuckets[ub] += n
	}
	c.historyCount += o.historyCount
	c.historySum += o.historySum
	c.createCount += o.createCount
	c.createSum += o.createSum
	c.persistCalls += o.persistCalls
	c.persistSum += o.persistSum
}

// scrapeServer reads the server's /metrics at url.
func scrapeServer(ctx context.Context, url, namespace string) (serverCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return serverCounters{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return serverCounters{}, fmt.Errorf("temporal server metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return serverCounters{}, fmt.Errorf("temporal server metrics: %s answered %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return serverCounters{}, fmt.Errorf("temporal server metrics: %w", err)
	}
	return countersOf(families, namespace), nil
}

// countersOf sums the series ServerFigures need from parsed families.
func countersOf(families map[string]*dto.MetricFamily, namespace string) serverCounters {
	c := serverCounters{startBuckets: map[float64]float64{}}
	for _, m := range families["service_latency"].GetMetric() {
		l := labelsOf(m)
		if l["operation"] != "StartWorkflowExecution" || l["namespace"] != namespace {
			continue
		}
		h := m.GetHistogram()
		switch l["service_name"] {
		case "frontend":
			c.startCount += float64(h.GetSampleCount())
			c.startSum += h.GetSampleSum()
			for _, b := range h.GetBucket() {
				c.startBuckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		case "history":
			c.historyCount += float64(h.GetSampleCount())
			c.historySum += h.GetSampleSum()
		}
	}
	// Calls are counted from the latency histogram: the dev server's
	// persistence_requests counter reaches its endpoint a scrape late.
	for _, m := range families["persistence_latency"].GetMetric() {
		h := m.GetHistogram()
		c.persistCalls += float64(h.GetSampleCount())
		c.persistSum += h.GetSampleSum()
		if l := labelsOf(m); l["operation"] == "CreateWorkflowExecution" && l["namespace"] == namespace {
			c.createCount += float64(h.GetSampleCount())
			c.createSum += h.GetSampleSum()
		}
	}
	return c
}

func labelsOf(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// figures are the differences from s to e, with the server's CPU over the
// span (cores × seconds). Nil when the server served no start in it.
func (s serverCounters) figures(e serverCounters, cpuSeconds float64) *ServerFigures {
	starts := e.startCount - s.startCount
	if starts <= 0 {
		return nil
	}
	f := &ServerFigures{
		Starts:                   starts,
		StartMeanMs:              1000 * (e.startSum - s.startSum) / starts,
		HistoryStartMeanMs:       1000 * ratio(e.historySum-s.historySum, e.historyCount-s.historyCount),
		CreateMeanMs:             1000 * ratio(e.createSum-s.createSum, e.createCount-s.createCount),
		PersistenceCallsPerStart: (e.persistCalls - s.persistCalls) / starts,
		PersistenceMsPerStart:    1000 * (e.persistSum - s.persistSum) / starts,
		CPUMsPerStart:            1000 * cpuSeconds / starts,
	}
	if f.CPUMsPerStart > 0 {
		f.StartsPerCore = 1000 / f.CPUMsPerStart
	}
	bounds := make([]float64, 0, len(e.startBuckets))
	for ub := range e.startBuckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	f.StartP50Ms = msOf(bucketQuantile(bounds, s.startBuckets, e.startBuckets, starts, 0.5))
	f.StartP99Ms = msOf(bucketQuantile(bounds, s.startBuckets, e.startBuckets, starts, 0.99))
	return f
}

// bucketQuantile is the upper bound of the first bucket whose count in the
// span reaches q of n (-1 when none of the finite ones does).
func bucketQuantile(bounds []float64, s, e map[float64]float64, n, q float64) float64 {
	for _, ub := range bounds {
		if !math.IsInf(ub, 1) && e[ub]-s[ub] >= q*n {
			return ub
		}
	}
	return -1
}

func msOf(seconds float64) float64 {
	if seconds < 0 {
		return seconds
	}
	return 1000 * seconds
}

// serverSpan measures the Temporal server's figures over a span of the
// bench: begin before it, end after it with the server's CPU in cores over
// elapsed. It measures nothing when the server is not the bench's own, or
// its endpoint does not answer (the figures are then missing, not wrong).
type serverSpan struct {
	b     *bench
	start serverCounters
	ok    bool
}

func (b *bench) beginServerSpan(ctx context.Context) serverSpan {
	if len(b.procs.temporalMetrics) == 0 {
		return serverSpan{}
	}
	c, err := scrapeServers(ctx, b.procs.temporalMetrics, b.svc.Temporal.Namespace)
	if err != nil {
		b.progress("  (temporal server metrics unread: %v)", err)
		return serverSpan{}
	}
	return serverSpan{b: b, start: c, ok: true}
}

func (s serverSpan) end(ctx context.Context, temporalCores float64, elapsed time.Duration) *ServerFigures {
	if !s.ok {
		return nil
	}
	c, err := scrapeServers(ctx, s.b.procs.temporalMetrics, s.b.svc.Temporal.Namespace)
	if err != nil {
		s.b.progress("  (temporal server metrics unread: %v)", err)
		return nil
	}
	return s.start.figures(c, temporalCores*elapsed.Seconds())
}

// String is the figures in one line, for progress and the results.
func (f *ServerFigures) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("%.0f starts, start latency mean %.1f ms (p50 ≤ %s ms, p99 ≤ %s ms; history %.1f ms, create-execution write %.2f ms), %.1f persistence calls and %.1f ms of persistence per start, %.2f ms server CPU per start (%.0f starts/s per core)",
		f.Starts, f.StartMeanMs, boundMs(f.StartP50Ms), boundMs(f.StartP99Ms), f.HistoryStartMeanMs, f.CreateMeanMs,
		f.PersistenceCallsPerStart, f.PersistenceMsPerStart, f.CPUMsPerStart, f.StartsPerCore)
}

func boundMs(ms float64) string {
	if ms < 0 {
		return "∞"
	}
	return fmt.Sprintf("%g", ms)
}

// externalTemporalFromEnv reads how to measure a Temporal server the bench
// did not start (TEMPORAL_ADDRESS): CAUSET_BENCH_TEMPORAL_METRICS, its
// Prometheus endpoints (comma-separated URLs, one per service of a
// cluster); CAUSET_BENCH_TEMPORAL_PIDFILES, files holding its processes'
// PIDs, for its CPU; CAUSET_BENCH_TEMPORAL_PGDATA, its PostgreSQL's data
// directory, whose CPU counts as the server's. Each is optional; without
// the endpoints the server's figures are not reported.
// scripts/temporal-cluster.sh writes all three for its cluster.
func externalTemporalFromEnv(getenv func(string) string) (procs, error) {
	var p procs
	for u := range strings.SplitSeq(getenv("CAUSET_BENCH_TEMPORAL_METRICS"), ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return p, fmt.Errorf("CAUSET_BENCH_TEMPORAL_METRICS: %q is not an http(s) URL", u)
		}
		p.temporalMetrics = append(p.temporalMetrics, u)
	}
	for f := range strings.SplitSeq(getenv("CAUSET_BENCH_TEMPORAL_PIDFILES"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return p, fmt.Errorf("CAUSET_BENCH_TEMPORAL_PIDFILES: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			return p, fmt.Errorf("CAUSET_BENCH_TEMPORAL_PIDFILES: %s holds %q, not a PID", f, strings.TrimSpace(string(data)))
		}
		p.temporalPIDs = append(p.temporalPIDs, pid)
	}
	if d := strings.TrimSpace(getenv("CAUSET_BENCH_TEMPORAL_PGDATA")); d != "" {
		if postmasterPID(d) == 0 {
			return p, fmt.Errorf("CAUSET_BENCH_TEMPORAL_PGDATA: no running PostgreSQL's postmaster.pid under %s", d)
		}
		p.temporalPGDir = d
	}
	return p, nil
}
