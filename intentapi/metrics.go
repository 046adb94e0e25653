package intentapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	intents *prometheus.CounterVec
	latency *prometheus.HistogramVec
	refused *prometheus.CounterVec
}

// newMetrics builds the server's metrics and registers them on reg (when
// set), with every status at zero so that rates exist from the start.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_runtime_intents_total",
			Help: "Intents answered by POST /v1/intents, by status: success, rejected, replayed, invalid (400, 413), unprocessable (422), reused (422: the intentId of another request), in_progress (409), unavailable (503), unknown (504: the commit's answer was lost), error (500).",
		}, []string{"status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "causet_runtime_intent_duration_seconds",
			Help:    "Time from the request to the answer of POST /v1/intents, by status.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to 8 s
		}, []string{"status"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causet_runtime_requests_refused_total",
			Help: "API requests refused before anything was done, by reason: unauthenticated (401: no known bearer token), forbidden (403: the token lacks the scope).",
		}, []string{"reason"}),
	}
	m.refused.WithLabelValues("unauthenticated")
	m.refused.WithLabelValues("forbidden")
	for _, o := range outcomes {
		m.intents.WithLabelValues(o)
		m.latency.WithLabelValues(o)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.intents, m.latency, m.refused} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(outcome string, elapsed time.Duration) {
	m.intents.WithLabelValues(outcome).Inc()
	m.latency.WithLabelValues(outcome).Observe(elapsed.Seconds())
}
