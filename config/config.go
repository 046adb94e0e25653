// Package config reads the service's environment with validation and
// defaults. A bad value stops the program with one line naming the variable,
// the value and what is allowed; nothing silently falls back to a default.
package config

import (
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Mode is where a projection's first attempt runs.
type Mode string

const (
	// ModeInline applies attempt 1 in the bridge; only failures become workflows.
	ModeInline Mode = "inline"
	// ModeWorkflow turns every matched event into a workflow; attempt 1 runs there.
	ModeWorkflow Mode = "workflow"
)

// Ordering is how later events of a retrying entity are treated.
type Ordering string

const (
	// OrderingEntity holds later events of a blocked (projection, fork, entity) in a lane.
	OrderingEntity Ordering = "entity"
	// OrderingNone applies later events inline at once.
	OrderingNone Ordering = "none"
)

// Config is every setting of DESIGN §3 that the service reads itself. The
// TEMPORAL_* variables are read by go.temporal.io/sdk/contrib/envconfig.
type Config struct {
	Retry             Retry
	DatabaseURL       string
	KafkaBrokers      []string
	EventsTopic       string
	DLQTopic          string
	ConsumerGroup     string
	TaskQueue         string
	BridgeMode        Mode
	Ordering          Ordering
	DLQReplayWindow   time.Duration
	BridgeMaxInflight int
	MetricsAddr       string
	// KafkaSecurity is the brokers' TLS and SASL settings (KAFKA_TLS*, KAFKA_SASL_*).
	KafkaSecurity KafkaSecurity
}

// Lookup returns an environment value and whether it is set; os.LookupEnv in
// production, a map in tests.
type Lookup func(key string) (string, bool)

// FromEnv reads the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// Load reads every variable through lookup, applying defaults for unset ones.
func Load(lookup Lookup) (Config, error) {
	p := parser{lookup: lookup}
	c := Config{
		Retry: Retry{
			MaxAttempts: p.intRange("PROJECTION_WORKER_MAX_RETRIES", 5, 1, 100, "an integer from 1 to 100 (total attempts, the first included)"),
			Initial:     p.millis("PROJECTION_WORKER_RETRY_INITIAL_MS", 1000),
			Multiplier:  p.multiplier("PROJECTION_WORKER_RETRY_MULTIPLIER", 2),
			Max:         p.millis("PROJECTION_WORKER_RETRY_MAX_MS", 30000),
		},
		DatabaseURL:       p.str("DATABASE_URL", ""),
		KafkaBrokers:      p.brokers("KAFKA_BROKERS", "127.0.0.1:9092"),
		EventsTopic:       p.name("CAUSET_EVENTS_TOPIC", "causet.events.v1"),
		DLQTopic:          p.name("CAUSET_DLQ_TOPIC", "causet.projection-dlq.v1"),
		ConsumerGroup:     p.name("CAUSET_CONSUMER_GROUP", "causet-projection-worker"),
		TaskQueue:         p.name("CAUSET_TASK_QUEUE", "causet-projections"),
		BridgeMode:        Mode(p.oneOf("CAUSET_BRIDGE_MODE", string(ModeInline), string(ModeInline), string(ModeWorkflow))),
		Ordering:          Ordering(p.oneOf("CAUSET_ORDERING", string(OrderingEntity), string(OrderingEntity), string(OrderingNone))),
		DLQReplayWindow:   p.duration("CAUSET_DLQ_REPLAY_WINDOW", 168*time.Hour),
		BridgeMaxInflight: p.intRange("CAUSET_BRIDGE_MAX_INFLIGHT", 256, 1, 1_000_000, "an integer from 1 to 1000000"),
		MetricsAddr:       p.hostPort("CAUSET_METRICS_ADDR", "127.0.0.1:9464"),
	}
	if p.err != nil {
		return Config{}, p.err
	}
	if err := c.Retry.Validate(); err != nil {
		return Config{}, err
	}
	sec, err := LoadKafkaSecurity(lookup)
	if err != nil {
		return Config{}, err
	}
	c.KafkaSecurity = sec
	return c, nil
}

// KafkaOpts returns the seed brokers and TLS/SASL options every Kafka client
// of the process starts from, followed by extra.
func (c Config) KafkaOpts(extra ...kgo.Opt) ([]kgo.Opt, error) {
	sec, err := c.KafkaSecurity.Opts()
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, sec...)
	return append(opts, extra...), nil
}

// RequireDatabaseURL returns the one-line error for a command that needs a database.
func (c Config) RequireDatabaseURL() error {
	if c.DatabaseURL == "" {
		return fmt.Errorf("DATABASE_URL is not set: want a PostgreSQL URL such as postgres://user@host:5432/db")
	}
	return nil
}

// parser keeps the first error so Load reads like a table of defaults.
type parser struct {
	lookup Lookup
	err    error
}

func (p *parser) fail(key, value, rule string) {
	if p.err == nil {
		p.err = fmt.Errorf("%s=%q is invalid: want %s", key, value, rule)
	}
}

func (p *parser) raw(key string) (string, bool) {
	v, ok := p.lookup(key)
	if !ok {
		return "", false
	}
	return strings.TrimSpace(v), true
}

func (p *parser) str(key, def string) string {
	if v, ok := p.raw(key); ok && v != "" {
		return v
	}
	return def
}

func (p *parser) name(key, def string) string {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	if v == "" || strings.ContainsAny(v, " \t\n,") {
		p.fail(key, v, "a non-empty name without spaces or commas")
		return def
	}
	return v
}

func (p *parser) intRange(key string, def, lo, hi int, rule string) int {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(key, v, rule)
		return def
	}
	return n
}

func (p *parser) millis(key string, def int) time.Duration {
	v, ok := p.raw(key)
	if !ok {
		return time.Duration(def) * time.Millisecond
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > int64(24*time.Hour/time.Millisecond) {
		p.fail(key, v, "a whole number of milliseconds from 1 to 86400000")
		return time.Duration(def) * time.Millisecond
	}
	return time.Duration(n) * time.Millisecond
}

func (p *parser) multiplier(key string, def float64) float64 {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 1 || f > 100 {
		p.fail(key, v, "a number from 1 to 100")
		return def
	}
	return f
}

func (p *parser) duration(key string, def time.Duration) time.Duration {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(key, v, "a positive Go duration such as 168h or 30m")
		return def
	}
	return d
}

func (p *parser) oneOf(key, def string, allowed ...string) string {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	p.fail(key, v, "one of "+strings.Join(allowed, ", "))
	return def
}

func (p *parser) hostPort(key, def string) string {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.fail(key, v, "host:port, such as 127.0.0.1:9464")
		return def
	}
	return v
}

func (p *parser) brokers(key, def string) []string {
	v, ok := p.raw(key)
	if !ok {
		v = def
	}
	var out []string
	for _, b := range strings.Split(v, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			p.fail(key, v, "comma-separated host:port seeds, such as 127.0.0.1:9092")
			return nil
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		p.fail(key, v, "comma-separated host:port seeds, such as 127.0.0.1:9092")
	}
	return out
}
