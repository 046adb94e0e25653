package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// lagTimeout bounds the lag query of one scrape.
const lagTimeout = 5 * time.Second

// metrics are the relay's Prometheus series (namespace causet_relay).
type metrics struct {
	published prometheus.Counter
	failures  prometheus.Counter
	setAside  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, log *slog.Logger) (*metrics, error) {
	const ns, sub = "causet", "relay"
	m := &metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "published_total", Help: "Events acknowledged by Kafka and marked published in the ledger."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_failures_total", Help: "Batches Kafka did not acknowledge whole; each is sent again after a backoff."}),
		setAside: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "set_aside_total", Help: "Events Kafka refused for themselves (alone, not with their batch), set aside so that the relay moves on."}),
	}
	if reg == nil {
		return m, nil
	}
	lag := &lagCollector{
		pool: pool,
		log:  log,
		events: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "lag_events"),
			"Ledger events not yet published (rows of causet_events with published_at IS NULL, less those set aside).", nil, nil),
		seconds: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "lag_seconds"),
			"Age of the oldest unpublished ledger event, 0 when there is none.", nil, nil),
		setAside: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "set_aside_events"),
			"Events set aside because Kafka refuses them, waiting for causet outbox redrive.", nil, nil),
	}
	for _, c := range []prometheus.Collector{m.published, m.failures, m.setAside, lag} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// lagCollector reads the outbox's backlog from the database at each scrape,
// so the figure is right whichever relay holds the lock, or none.
type lagCollector struct {
	pool                      *pgxpool.Pool
	log                       *slog.Logger
	events, seconds, setAside *prometheus.Desc
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.seconds
	ch <- c.setAside
}

// Collect leaves both gauges out when the database does not answer, rather
// than report a backlog of zero or fail the whole scrape.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	var (
		n, aside int64
		age      float64
	)
	err := c.pool.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(recorded_at)), 0)::float8,
			(SELECT count(*) FROM causet_events_set_aside)
		FROM causet_events e WHERE published_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM causet_events_set_aside s WHERE s.position = e.position)`).Scan(&n, &age, &aside)
	if err != nil {
		c.log.Debug("relay lag not read", "error", err.Error())
		return
	}
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, max(age, 0))
	ch <- prometheus.MustNewConstMetric(c.setAside, prometheus.GaugeValue, float64(aside))
}
