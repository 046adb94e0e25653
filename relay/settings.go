package relay

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/causet/projection-retry/config"
)

// Defaults and bounds of the relay's environment.
const (
	DefaultBatch        = 500
	DefaultPollInterval = 100 * time.Millisecond

	// MaxBatch bounds the rows held in memory at once: an envelope may be
	// up to event.MaxSize.
	MaxBatch        = 10_000
	minPollInterval = time.Millisecond
	maxPollInterval = time.Minute
)

// Settings are the relay's own environment variables.
type Settings struct {
	// Batch is CAUSET_RELAY_BATCH: rows read and produced at once.
	Batch int
	// PollInterval is CAUSET_RELAY_POLL_INTERVAL: the wait after a batch
	// that was not full.
	PollInterval time.Duration
}

// LoadSettings reads CAUSET_RELAY_BATCH and CAUSET_RELAY_POLL_INTERVAL
// through lookup (os.LookupEnv in production), applying the defaults for
// unset ones. A bad value is a one-line error naming the variable, as
// package config words them.
func LoadSettings(lookup config.Lookup) (Settings, error) {
	s := Settings{Batch: DefaultBatch, PollInterval: DefaultPollInterval}
	if v, ok := lookup("CAUSET_RELAY_BATCH"); ok {
		v = strings.TrimSpace(v)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxBatch {
			return Settings{}, invalid("CAUSET_RELAY_BATCH", v, fmt.Sprintf("an integer from 1 to %d (rows per batch)", MaxBatch))
		}
		s.Batch = n
	}
	if v, ok := lookup("CAUSET_RELAY_POLL_INTERVAL"); ok {
		v = strings.TrimSpace(v)
		d, err := time.ParseDuration(v)
		if err != nil || d < minPollInterval || d > maxPollInterval {
			return Settings{}, invalid("CAUSET_RELAY_POLL_INTERVAL", v, "a Go duration from 1ms to 1m, such as 100ms or 1s")
		}
		s.PollInterval = d
	}
	return s, nil
}

func invalid(key, value, rule string) error {
	return fmt.Errorf("%s=%q is invalid: want %s", key, value, rule)
}
