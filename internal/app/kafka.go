package app

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/causet/projection-retry/config"
)

// KafkaSecurityOpts are the franz-go options of the KAFKA_TLS* and
// KAFKA_SASL_* settings: kgo.DialTLSConfig when TLS is on and kgo.SASL when
// a mechanism is set; none when neither. Every Kafka client of the process
// appends them to its other options.
func KafkaSecurityOpts(k config.KafkaSecurity) ([]kgo.Opt, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if k.TLS {
		tc, err := k.TLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
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
	sec, err := KafkaSecurityOpts(cfg.KafkaSecurity)
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}, sec...)
	return append(opts, extra...), nil
}
