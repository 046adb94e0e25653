package activities

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts retries, dead letters and replays by projection. A nil
// *Metrics counts nothing.
type Metrics struct {
	retries      *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	published    *prometheus.CounterVec
	replaysTotal *prometheus.CounterVec
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_projection_retries_total",
			Help: "Failed projection attempts that will be retried.",
		}, []string{"projection", "error_kind"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_projection_dead_letters_total",
			Help: "Projection events whose last attempt failed.",
		}, []string{"projection", "error_kind"}),
		// Counted where the record lands, so a last attempt that timed out
		// (and so never reported) is counted too: the DLQ's inflow.
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_projection_dead_letters_published_total",
			Help: "Dead letters the worker wrote to the DLQ topic, by projection and the error kind of the attempt that dead-lettered them.",
		}, []string{"projection", "error_kind"}),
		replaysTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_projection_replays_succeeded_total",
			Help: "Dead-lettered events applied by a replay.",
		}, []string{"projection"}),
	}
	reg.MustRegister(m.retries, m.deadLetters, m.published, m.replaysTotal)
	return m
}

func (m *Metrics) retried(projection, kind string) {
	if m != nil {
		m.retries.WithLabelValues(projection, kind).Inc()
	}
}

func (m *Metrics) deadLettered(projection, kind string) {
	if m != nil {
		m.deadLetters.WithLabelValues(projection, kind).Inc()
	}
}

func (m *Metrics) publishedDeadLetter(projection, kind string) {
	if m != nil {
		m.published.WithLabelValues(projection, kind).Inc()
	}
}

func (m *Metrics) replayed(projection string) {
	if m != nil {
		m.replaysTotal.WithLabelValues(projection).Inc()
	}
}
