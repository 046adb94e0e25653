package app

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/dialer"
)

// KafkaConnOpts are the franz-go options of every connection to the
// brokers: a dialer with linkTimeout (package internal/dialer: keepalive
// and TCP_USER_TIMEOUT), TLS when KAFKA_TLS is on, and kgo.SASL when a
// mechanism is set. Every Kafka client of the process appends them to its
// other options.
func KafkaConnOpts(k config.KafkaSecurity, linkTimeout time.Duration) ([]kgo.Opt, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	nd := dialer.New(linkTimeout)
	dial := nd.DialContext
	if k.TLS {
		tc, err := k.TLSConfig()
		if err != nil {
			return nil, err
		}
		dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			c := tc.Clone()
			if c.ServerName == "" {
				// As kgo.DialTLSConfig does: verify the broker's own name.
				if host, _, err := net.SplitHostPort(address); err == nil {
					c.ServerName = host
				}
			}
			return (&tls.Dialer{NetDialer: nd, Config: c}).DialContext(ctx, network, address)
		}
	}
	opts := []kgo.Opt{kgo.Dialer(dial)}
	switch k.SASLMechanism {
	case config.SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsMechanism()))
	case config.SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsSha256Mechanism()))
	case config.SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsSha512Mechanism()))
	}
	return opts, nil
}

// KafkaOpts are the seed brokers and TLS/SASL options every Kafka client of
// the process starts from, followed by extra.
func KafkaOpts(cfg config.Config, extra ...kgo.Opt) ([]kgo.Opt, error) {
	sec, err := KafkaConnOpts(cfg.KafkaSecurity, cfg.LinkTimeout)
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}, sec...)
	return append(opts, extra...), nil
}
