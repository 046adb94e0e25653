package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as Go's duration
// string ("1s", "168h0m0s"); it also reads the integer nanoseconds that
// payloads written before it hold.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or integer nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var ns int64
	if err := json.Unmarshal(b, &ns); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"1s\" or integer nanoseconds", b)
	}
	*d = Duration(ns)
	return nil
}

// retryJSON is Retry in JSON: keys in the contract's camelCase, delays as
// duration strings. Go's decoder matches keys case-insensitively, so the
// capitalised keys of older payloads read the same.
type retryJSON struct {
	MaxAttempts int      `json:"maxAttempts"`
	Initial     Duration `json:"initial"`
	Multiplier  float64  `json:"multiplier"`
	Max         Duration `json:"max"`
}

// MarshalJSON writes r as {"maxAttempts":5,"initial":"1s","multiplier":2,"max":"30s"}.
func (r Retry) MarshalJSON() ([]byte, error) {
	return json.Marshal(retryJSON{MaxAttempts: r.MaxAttempts, Initial: Duration(r.Initial), Multiplier: r.Multiplier, Max: Duration(r.Max)})
}

// UnmarshalJSON reads what MarshalJSON writes, and the capitalised keys and
// nanosecond delays of older payloads.
func (r *Retry) UnmarshalJSON(b []byte) error {
	var j retryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Retry{MaxAttempts: j.MaxAttempts, Initial: time.Duration(j.Initial), Multiplier: j.Multiplier, Max: time.Duration(j.Max)}
	return nil
}
