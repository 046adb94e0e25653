package config

import (
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/causet/projection-retry/internal/dialer"
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
	// OrderingEntity parks later events of a blocked (projection, fork, entity)
	// until its head settles.
	OrderingEntity Ordering = "entity"
	// OrderingNone applies later events inline at once.
	OrderingNone Ordering = "none"
)

// Defaults of CONTRACT §3, exported once: every package that needs one
// uses these.
const (
	DefaultKafkaBrokers  = "127.0.0.1:9092"
	DefaultEventsTopic   = "causet.events.v1"
	DefaultDLQTopic      = "causet.projection-dlq.v1"
	DefaultConsumerGroup = "causet-projection-worker"
	DefaultTaskQueue     = "causet-projections"
	DefaultReplayWindow  = 168 * time.Hour
	DefaultMaxInflight   = 256
	DefaultMetricsAddr   = "127.0.0.1:9464"

	// DefaultParkedMaxPerKey bounds the events parked behind one key's head:
	// ten times a hot key's burst in the reliability suite, about 10 MB of
	// rows at 1 KiB an event.
	DefaultParkedMaxPerKey = 100_000
	// DefaultParkedMaxPerPartition bounds the events parked in one
	// partition: about 1 GB of rows at 1 KiB an event.
	DefaultParkedMaxPerPartition = 1_000_000
	// DefaultIRCostLimit is the CEL cost one evaluation may spend.
	DefaultIRCostLimit = 1_000_000
	// DefaultBridgeMaxBufferedBytes is the queued record bytes per
	// partition at which its fetching pauses.
	DefaultBridgeMaxBufferedBytes = 256 << 20
	// DefaultDedupeHorizon is how long the dedupe ledger remembers an
	// applied event: two weeks, twice Kafka's default retention and the
	// default replay window.
	DefaultDedupeHorizon = 336 * time.Hour
)

// Config is every setting of CONTRACT §3 that the service reads itself. The
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
	// ParkedMaxPerKey and ParkedMaxPerPartition bound the events parked
	// behind blocked keys (CAUSET_PARKED_MAX_PER_KEY,
	// CAUSET_PARKED_MAX_PER_PARTITION); at a bound the partition waits.
	ParkedMaxPerKey, ParkedMaxPerPartition int64
	// IRCostLimit bounds the CEL cost of one expression evaluation
	// (CAUSET_IR_COST_LIMIT); an evaluation past it fails as ir_eval.
	IRCostLimit uint64
	// BridgeMaxBufferedBytes pauses a partition's fetching once its queued
	// record values reach it (CAUSET_BRIDGE_MAX_BUFFERED_BYTES).
	BridgeMaxBufferedBytes int64
	// BridgeInstanceID, when set, makes the bridge a static member of its
	// consumer group (CAUSET_BRIDGE_INSTANCE_ID): a restart within the
	// session timeout gets its partitions back without a rebalance.
	BridgeInstanceID string
	// KafkaSecurity is the brokers' TLS and SASL settings (KAFKA_TLS*, KAFKA_SASL_*).
	KafkaSecurity KafkaSecurity
	// DedupeHorizon is how long the dedupe ledger remembers an applied
	// event (CAUSET_DEDUPE_HORIZON); at least the replay window.
	DedupeHorizon time.Duration
	// WorkerVersioning is the worker's Worker Deployment Version
	// (CAUSET_WORKER_DEPLOYMENT, CAUSET_WORKER_BUILD_ID); off when unset.
	WorkerVersioning WorkerVersioning
	// Incidents is the detection of systemic failures (CAUSET_INCIDENT_*).
	Incidents Incidents
	// DLQHoldEntity keeps a dead letter's entity waiting behind it
	// (CAUSET_DLQ_HOLD_ENTITY, entity ordering only).
	DLQHoldEntity bool
	// AutoMigrate lets a process apply the pending schema migrations at
	// start (CAUSET_AUTO_MIGRATE); without it a process refuses an older
	// schema and names `causet migrate up`.
	AutoMigrate bool
	// LinkTimeout is how long a connection to PostgreSQL, Kafka or
	// Temporal may go silent before it is closed as dead
	// (CAUSET_LINK_TIMEOUT; package internal/dialer).
	LinkTimeout time.Duration
}

// Lookup returns an environment value and whether it is set; os.LookupEnv in
// production, a map in tests.
type Lookup func(key string) (string, bool)

// FromEnv reads the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// Load reads every variable through lookup, applying defaults for unset ones.
func Load(lookup Lookup) (Config, error) {
	p := parser{lookup: lookup}
	def := DefaultRetry()
	c := Config{
		Retry: Retry{
			MaxAttempts: p.intRange("PROJECTION_WORKER_MAX_RETRIES", def.MaxAttempts, 1, 100, "an integer from 1 to 100 (total attempts, the first included)"),
			Initial:     p.millis("PROJECTION_WORKER_RETRY_INITIAL_MS", int(def.Initial.Milliseconds())),
			Multiplier:  p.multiplier("PROJECTION_WORKER_RETRY_MULTIPLIER", def.Multiplier),
			Max:         p.millis("PROJECTION_WORKER_RETRY_MAX_MS", int(def.Max.Milliseconds())),
		},
		DatabaseURL:       p.str("DATABASE_URL", ""),
		KafkaBrokers:      p.brokers("KAFKA_BROKERS", DefaultKafkaBrokers),
		EventsTopic:       p.name("CAUSET_EVENTS_TOPIC", DefaultEventsTopic),
		DLQTopic:          p.name("CAUSET_DLQ_TOPIC", DefaultDLQTopic),
		ConsumerGroup:     p.name("CAUSET_CONSUMER_GROUP", DefaultConsumerGroup),
		TaskQueue:         p.name("CAUSET_TASK_QUEUE", DefaultTaskQueue),
		BridgeMode:        Mode(p.oneOf("CAUSET_BRIDGE_MODE", string(ModeInline), string(ModeInline), string(ModeWorkflow))),
		Ordering:          Ordering(p.oneOf("CAUSET_ORDERING", string(OrderingEntity), string(OrderingEntity), string(OrderingNone))),
		DLQReplayWindow:   p.duration("CAUSET_DLQ_REPLAY_WINDOW", DefaultReplayWindow),
		BridgeMaxInflight: p.intRange("CAUSET_BRIDGE_MAX_INFLIGHT", DefaultMaxInflight, 1, 1_000_000, "an integer from 1 to 1000000"),
		MetricsAddr:       p.hostPort("CAUSET_METRICS_ADDR", DefaultMetricsAddr),
		ParkedMaxPerKey: p.int64Range("CAUSET_PARKED_MAX_PER_KEY", DefaultParkedMaxPerKey, 1, 1_000_000_000,
			"an integer from 1 to 1000000000 (events parked behind one key)"),
		ParkedMaxPerPartition: p.int64Range("CAUSET_PARKED_MAX_PER_PARTITION", DefaultParkedMaxPerPartition, 1, 1_000_000_000,
			"an integer from 1 to 1000000000 (events parked in one partition)"),
		IRCostLimit: uint64(p.int64Range("CAUSET_IR_COST_LIMIT", DefaultIRCostLimit, 1_000, 1_000_000_000,
			"an integer from 1000 to 1000000000 (CEL cost units per evaluation)")),
		BridgeMaxBufferedBytes: p.int64Range("CAUSET_BRIDGE_MAX_BUFFERED_BYTES", DefaultBridgeMaxBufferedBytes, 1<<20, 1<<40,
			"a number of bytes from 1048576 (1 MiB) to 1099511627776 (1 TiB)"),
		BridgeInstanceID: p.instanceID("CAUSET_BRIDGE_INSTANCE_ID"),
		DedupeHorizon:    p.duration("CAUSET_DEDUPE_HORIZON", DefaultDedupeHorizon),
		DLQHoldEntity:    p.boolean("CAUSET_DLQ_HOLD_ENTITY", false),
		AutoMigrate:      p.boolean("CAUSET_AUTO_MIGRATE", false),
		LinkTimeout:      p.linkTimeout(),
	}
	for _, r := range removedVariables {
		if v, ok := lookup(r.name); ok && strings.TrimSpace(v) != "" {
			return Config{}, fmt.Errorf("%s=%q is no longer read: %s", r.name, v, r.instead)
		}
	}
	if p.err != nil {
		return Config{}, p.err
	}
	if c.DedupeHorizon < c.DLQReplayWindow || c.DedupeHorizon < time.Hour {
		// A replayed dead letter, or a redelivery within the window, must
		// still find the events applied before it.
		return Config{}, fmt.Errorf("CAUSET_DEDUPE_HORIZON=%s is shorter than CAUSET_DLQ_REPLAY_WINDOW=%s (or than 1h): the dedupe ledger must remember applied events at least as long as dead letters can be replayed",
			c.DedupeHorizon, c.DLQReplayWindow)
	}
	if c.DLQHoldEntity && c.Ordering != OrderingEntity {
		return Config{}, fmt.Errorf("CAUSET_DLQ_HOLD_ENTITY=true needs CAUSET_ORDERING=entity (have %s): only entity ordering keeps an entity's later events behind its dead letter", c.Ordering)
	}
	if err := c.Retry.Validate(); err != nil {
		return Config{}, err
	}
	sec, err := LoadKafkaSecurity(lookup)
	if err != nil {
		return Config{}, err
	}
	c.KafkaSecurity = sec
	if c.WorkerVersioning, err = LoadWorkerVersioning(lookup); err != nil {
		return Config{}, err
	}
	if c.Incidents, err = LoadIncidents(lookup, c.BridgeMode, c.Ordering); err != nil {
		return Config{}, err
	}
	return c, nil
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

func (p *parser) int64Range(key string, def, lo, hi int64, rule string) int64 {
	v, ok := p.raw(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		p.fail(key, v, rule)
		return def
	}
	return n
}

// instanceID reads a static group member ID: empty (dynamic membership) or
// a name Kafka accepts (at most 249 of [a-zA-Z0-9._-]).
func (p *parser) instanceID(key string) string {
	v, ok := p.raw(key)
	if !ok || v == "" {
		return ""
	}
	if len(v) > 249 || strings.IndexFunc(v, func(r rune) bool {
		return !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		p.fail(key, v, "at most 249 of the characters a-z A-Z 0-9 . _ - (unique per bridge process, stable across its restarts)")
		return ""
	}
	return v
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

// LoadLinkTimeout reads CAUSET_LINK_TIMEOUT alone, for the commands that
// need no other setting.
func LoadLinkTimeout(lookup Lookup) (time.Duration, error) {
	p := parser{lookup: lookup}
	d := p.linkTimeout()
	return d, p.err
}

func (p *parser) linkTimeout() time.Duration {
	const key = "CAUSET_LINK_TIMEOUT"
	v, ok := p.raw(key)
	if !ok {
		return dialer.DefaultLinkTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < dialer.MinLinkTimeout || d > dialer.MaxLinkTimeout {
		p.fail(key, v, fmt.Sprintf("a Go duration from %s to %s, such as 15s", dialer.MinLinkTimeout, dialer.MaxLinkTimeout))
		return dialer.DefaultLinkTimeout
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
