package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/causet/projection-retry/worker"
)

// defaultTemporalAddress is where Temporal is when TEMPORAL_ADDRESS (and
// Temporal's config file) name no address.
const defaultTemporalAddress = "127.0.0.1:7233"

// TemporalOptions say how DialTemporal reaches Temporal.
type TemporalOptions struct {
	// HostPort, when set, is dialled in namespace "default" with nothing
	// else read: a dev server the process started itself. When empty the
	// client is built from TEMPORAL_* (address, namespace, API key, TLS) and
	// Temporal's config file with contrib/envconfig, Temporal's own
	// convention, on 127.0.0.1:7233 and namespace "default" by default.
	HostPort string
	// Metrics, when set, receives the SDK's metrics (tally, Prometheus
	// naming).
	Metrics prometheus.Registerer
}

// Temporal is a connected client with the namespace it uses. Close closes
// the client and stops its metrics. (The client is a field, not embedded:
// the SDK's worker wants the client Dial returned, not a wrapper.)
type Temporal struct {
	// Client is the client client.DialContext returned.
	Client client.Client
	// Namespace is the client's namespace.
	Namespace string
	// HostPort is the frontend it dialled.
	HostPort string

	closeMetrics func()
}

// Close closes the client, then stops reporting its metrics.
func (t *Temporal) Close() {
	t.Client.Close()
	t.closeMetrics()
}

// DialTemporal connects to Temporal as o says, within 30 s, with the SDK's
// logs bridged into logger.
func DialTemporal(ctx context.Context, logger *slog.Logger, o TemporalOptions) (*Temporal, error) {
	opts := client.Options{HostPort: o.HostPort, Namespace: client.DefaultNamespace}
	if o.HostPort == "" {
		var err error
		if opts, err = envconfig.LoadDefaultClientOptions(); err != nil {
			return nil, fmt.Errorf("temporal client configuration: %w", err)
		}
		if opts.HostPort == "" {
			opts.HostPort = defaultTemporalAddress
		}
		if opts.Namespace == "" {
			opts.Namespace = client.DefaultNamespace
		}
	}
	opts.Logger = worker.SDKLogger(logger)
	closeMetrics := func() {}
	if o.Metrics != nil {
		h, closer, err := worker.MetricsHandler(o.Metrics, logger)
		if err != nil {
			return nil, err
		}
		opts.MetricsHandler, closeMetrics = h, closer
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		closeMetrics()
		return nil, fmt.Errorf("connect to Temporal at %s: %w", opts.HostPort, err)
	}
	return &Temporal{Client: c, Namespace: opts.Namespace, HostPort: opts.HostPort, closeMetrics: closeMetrics}, nil
}

// Probe is the proof of a Temporal outage the bridge asks for: the
// frontend's health check.
func (t *Temporal) Probe(ctx context.Context) error {
	_, err := t.Client.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}
