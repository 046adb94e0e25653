package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/dialer"
	"github.com/causet/projection-retry/internal/tracing"
	"github.com/causet/projection-retry/payloadcodec"
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
	// PayloadKeys, when set, are the keys that encrypt the client's payloads
	// (a zero value: none). When nil they are read from CAUSET_PAYLOAD_KEYS,
	// CAUSET_PAYLOAD_KEYS_FILE and CAUSET_PAYLOAD_KEY_CURRENT, with or
	// without HostPort: every client of every command encrypts alike.
	PayloadKeys *config.PayloadKeys
	// Tracing, when on, adds the SDK's OpenTelemetry interceptor to the
	// client and the workers built on it (nil: off; Service passes its own,
	// commands tracing.Default()).
	Tracing *tracing.Tracing
	// LinkTimeout bounds a silent connection (package internal/dialer);
	// zero reads CAUSET_LINK_TIMEOUT.
	LinkTimeout time.Duration
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
	// DataConverter is the client's: the SDK's default, wrapped in the
	// payload codec when PayloadKeys are enabled. Decode payloads read
	// from histories or descriptions with it, never with the default.
	DataConverter converter.DataConverter
	// PayloadKeys are the keys the client encrypts with (not enabled: off).
	PayloadKeys config.PayloadKeys

	closeMetrics func()
}

// Close closes the client, then stops reporting its metrics.
func (t *Temporal) Close() {
	t.Client.Close()
	t.closeMetrics()
}

// TemporalKeepAlive is how long a connection to Temporal may be quiet before
// gRPC pings it. The frontend refuses pings more frequent than every 10 s.
const TemporalKeepAlive = 15 * time.Second

// TemporalConnectTimeout bounds a new connection to Temporal, its TCP, TLS
// and HTTP/2 handshakes together.
const TemporalConnectTimeout = 10 * time.Second

// DialTemporal connects to Temporal as o says, within 30 s, with the SDK's
// logs bridged into logger.
func DialTemporal(ctx context.Context, logger *slog.Logger, o TemporalOptions) (*Temporal, error) {
	keys, codec, dc, err := payloadConverter(o.PayloadKeys)
	if err != nil {
		return nil, err
	}
	opts := client.Options{HostPort: o.HostPort, Namespace: client.DefaultNamespace}
	if o.HostPort == "" {
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
	link := o.LinkTimeout
	if link == 0 {
		if link, err = config.LoadLinkTimeout(os.LookupEnv); err != nil {
			return nil, err
		}
	}
	nd := dialer.New(link)
	// A new connection must finish its handshake within
	// TemporalConnectTimeout (the SDK gives it 20 s): one opened while a
	// proxy in front of the frontend hangs is given up soon after the
	// proxy answers again, not 20 s later. Reconnects back off as the SDK's
	// polls do (200 ms up to 10 s).
	cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: TemporalConnectTimeout}
	cp.Backoff.BaseDelay, cp.Backoff.MaxDelay = 200*time.Millisecond, 10*time.Second
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return nd.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithConnectParams(cp))
	// gRPC pings a connection quiet for TemporalKeepAlive; with the
	// dialer's TCP_USER_TIMEOUT an unanswered ping closes it within the
	// link timeout, so a silent link fails the worker's long polls too.
	opts.ConnectionOptions.KeepAliveTime = TemporalKeepAlive
	opts.ConnectionOptions.KeepAliveTimeout = link
	opts.Logger = worker.SDKLogger(logger)
	opts.DataConverter = dc
	tracers, err := o.Tracing.TemporalInterceptors()
	if err != nil {
		return nil, err
	}
	opts.Interceptors = append(opts.Interceptors, tracers...)
	if keys.Enabled() {
		// The default failure converter encodes error details with the
		// SDK's default data converter, not the client's: without this the
		// details of activity failures would stay plaintext. Messages and
		// stack traces stay readable (docs/ENCRYPTION.md).
		opts.FailureConverter = temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})
	}
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
	if codec != nil && o.Metrics != nil {
		registerCodecMetrics(o.Metrics, codec, logger)
	}
	if keys.Enabled() {
		logger.Info("temporal_payload_encryption", "event", "temporal_payload_encryption",
			"currentKeyId", keys.Current, "keyIds", keys.IDs())
	}
	return &Temporal{Client: c, Namespace: opts.Namespace, HostPort: opts.HostPort,
		DataConverter: dc, PayloadKeys: keys, closeMetrics: closeMetrics}, nil
}

// payloadConverter is the data converter of keys (nil: the environment's):
// the SDK's default, encrypting with codec when keys are enabled, or
// Keyless, which names the missing keys when it meets an encrypted payload.
func payloadConverter(keys *config.PayloadKeys) (config.PayloadKeys, *payloadcodec.Codec, converter.DataConverter, error) {
	var k config.PayloadKeys
	if keys != nil {
		k = *keys
	} else {
		var err error
		if k, err = config.PayloadKeysFromEnv(); err != nil {
			return config.PayloadKeys{}, nil, nil, err
		}
	}
	if !k.Enabled() {
		return k, nil, payloadcodec.Keyless(), nil
	}
	codec, err := payloadcodec.New(k)
	if err != nil {
		return config.PayloadKeys{}, nil, nil, err
	}
	return k, codec, payloadcodec.DataConverter(codec), nil
}

// registerCodecMetrics exports the codec's counts: the payloads encrypted
// under the current key (GCM with random nonces allows 2^32 per key, see
// docs/ENCRYPTION.md) and the decodes that failed (an unknown key ID,
// tampering).
func registerCodecMetrics(reg prometheus.Registerer, codec *payloadcodec.Codec, logger *slog.Logger) {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "causet_payload_encrypted_total",
			Help:        "Temporal payloads this process encrypted, by key ID; rotate a key well before 2^32 (4.3e9) across all processes.",
			ConstLabels: prometheus.Labels{"key_id": codec.Current()},
		}, func() float64 { e, _ := codec.Stats(); return float64(e) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "causet_payload_decrypt_failures_total",
			Help: "Temporal payload decodes that failed in this process: a key ID it lacks, or altered data.",
		}, func() float64 { _, f := codec.Stats(); return float64(f) }),
	} {
		if err := reg.Register(c); err != nil {
			logger.Warn("payload codec metric registration failed", "err", err)
		}
	}
}

// Probe is the proof of a Temporal outage the bridge asks for: the
// frontend's health check.
func (t *Temporal) Probe(ctx context.Context) error {
	_, err := t.Client.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}
