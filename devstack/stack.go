package devstack

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Options configure Start.
type Options struct {
	// Getenv reads DATABASE_URL, TEMPORAL_ADDRESS and KAFKA_BROKERS.
	// Optional, defaults to os.Getenv.
	Getenv func(string) string
	// Topics are created (3 partitions) on the Kafka in use. Optional.
	Topics []string
	// DefaultPorts prefers the well-known ports (Temporal 7233 and UI 8233,
	// Kafka 9092) when they are free, so the temporal CLI and `causet
	// produce` work without flags. Optional, defaults to false: free ports.
	DefaultPorts bool
	// TemporalCLI is the temporal binary. Optional, defaults to FindTemporalCLI().
	TemporalCLI string
	// Logger receives one line per service started. Optional, defaults to none.
	Logger *slog.Logger
	// UICodecEndpoint is the remote codec the started dev server's web UI
	// decodes payloads with (`--ui-codec-endpoint`). Optional.
	UICodecEndpoint string
}

// Stack is the set of services `causet dev` runs against: each either
// started here (its *Postgres/*Temporal/*Kafka is non-nil) or taken from the
// environment.
type Stack struct {
	// DatabaseURL is the PostgreSQL URL.
	DatabaseURL string
	// TemporalAddress is the Temporal frontend (host:port); empty when taken
	// from TEMPORAL_ADDRESS, in which case the client is built from the
	// TEMPORAL_* environment (namespace, TLS, API key).
	TemporalAddress string
	// TemporalUI is the web UI's base URL when the dev server was started here.
	TemporalUI string
	// KafkaBrokers are the seed brokers.
	KafkaBrokers []string

	// Started services (nil when replaced by an environment variable).
	Postgres *Postgres
	Temporal *Temporal
	Kafka    *Kafka

	stopOnce sync.Once
}

// Start starts PostgreSQL, Temporal and Kafka, each unless replaced by its
// environment variable (DATABASE_URL, TEMPORAL_ADDRESS, KAFKA_BROKERS).
// PostgreSQL and Temporal start concurrently. On error everything already
// started is stopped.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	env := func(k string) string { return strings.TrimSpace(opts.Getenv(k)) }
	if env("TEMPORAL_ADDRESS") == "" && opts.TemporalCLI == "" {
		cli, err := FindTemporalCLI() // fail before starting anything
		if err != nil {
			return nil, err
		}
		opts.TemporalCLI = cli
	}
	s := &Stack{}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()

	var wg sync.WaitGroup
	var pgErr, tErr error
	if u := env("DATABASE_URL"); u != "" {
		s.DatabaseURL = u
		opts.Logger.Info("using DATABASE_URL")
	} else {
		wg.Go(func() {
			s.Postgres, pgErr = StartPostgres(ctx)
			if pgErr == nil {
				s.DatabaseURL = s.Postgres.URL
				opts.Logger.Info("postgres started", "port", s.Postgres.Port, "dir", s.Postgres.Dir)
			}
		})
	}
	if a := env("TEMPORAL_ADDRESS"); a != "" {
		opts.Logger.Info("using TEMPORAL_ADDRESS", "address", a)
	} else {
		wg.Go(func() {
			s.Temporal, tErr = StartTemporal(ctx, TemporalOptions{CLI: opts.TemporalCLI, DefaultPorts: opts.DefaultPorts, UICodecEndpoint: opts.UICodecEndpoint})
			if tErr == nil {
				s.TemporalAddress, s.TemporalUI = s.Temporal.HostPort, s.Temporal.UIURL
				opts.Logger.Info("temporal dev server started", "address", s.Temporal.HostPort, "ui", s.Temporal.UIURL, "pid", s.Temporal.PID)
			}
		})
	}
	if b := env("KAFKA_BROKERS"); b != "" {
		for _, x := range strings.Split(b, ",") {
			if x = strings.TrimSpace(x); x != "" {
				s.KafkaBrokers = append(s.KafkaBrokers, x)
			}
		}
		opts.Logger.Info("using KAFKA_BROKERS", "brokers", s.KafkaBrokers)
	} else {
		k, err := StartKafka(KafkaOptions{Topics: opts.Topics, DefaultPort: opts.DefaultPorts})
		if err != nil {
			wg.Wait()
			return nil, err
		}
		s.Kafka, s.KafkaBrokers = k, k.Brokers
		opts.Logger.Info("in-process kafka started", "brokers", k.Brokers)
	}
	wg.Wait()
	if err := errors.Join(pgErr, tErr); err != nil {
		return nil, err
	}
	if s.Kafka == nil && len(opts.Topics) > 0 {
		if err := EnsureTopics(ctx, s.KafkaBrokers, 3, opts.Topics...); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// Stop stops every service Start started, in reverse order, and removes
// their temp dirs. It is idempotent.
func (s *Stack) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.Kafka.Stop()
		if s.Temporal != nil {
			s.Temporal.Stop()
		}
		if s.Postgres != nil {
			err = s.Postgres.Stop()
		}
	})
	return err
}
