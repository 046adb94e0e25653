package contract

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/causet/projection-retry/config"
)

// The inputs of the workflows are what the Temporal UI shows first, so
// they are written to be read: durations as strings ("168h0m0s"), a Kafka
// key that is UTF-8 as text (keyText), other keys as base64 (key). Both
// forms of each are read, so histories written before keep replaying.

type retryInputFields RetryInput

type retryInputJSON struct {
	retryInputFields
	Key          []byte          `json:"key,omitempty"`
	KeyText      *string         `json:"keyText,omitempty"`
	ReplayWindow config.Duration `json:"replayWindow"`
}

// MarshalJSON writes in with its replay window as a duration string and its
// key as text when it is UTF-8.
func (in RetryInput) MarshalJSON() ([]byte, error) {
	w := retryInputJSON{retryInputFields: retryInputFields(in), ReplayWindow: config.Duration(in.ReplayWindow)}
	if len(in.Key) > 0 && utf8.Valid(in.Key) {
		s := string(in.Key)
		w.KeyText = &s
	} else {
		w.Key = in.Key
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes and the older form (base64
// key, nanosecond replay window).
func (in *RetryInput) UnmarshalJSON(b []byte) error {
	var w retryInputJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*in = RetryInput(w.retryInputFields)
	in.ReplayWindow = time.Duration(w.ReplayWindow)
	in.Key = w.Key
	if w.KeyText != nil {
		in.Key = []byte(*w.KeyText)
	}
	return nil
}

type incidentInputFields IncidentInput

type incidentInputJSON struct {
	incidentInputFields
	HoldMax    config.Duration `json:"holdMax,omitempty"`
	QuietClose config.Duration `json:"quietClose,omitempty"`
}

// MarshalJSON writes in with its durations as strings.
func (in IncidentInput) MarshalJSON() ([]byte, error) {
	return json.Marshal(incidentInputJSON{incidentInputFields: incidentInputFields(in),
		HoldMax: config.Duration(in.HoldMax), QuietClose: config.Duration(in.QuietClose)})
}

// UnmarshalJSON reads durations as strings or integer nanoseconds.
func (in *IncidentInput) UnmarshalJSON(b []byte) error {
	var w incidentInputJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*in = IncidentInput(w.incidentInputFields)
	in.HoldMax, in.QuietClose = time.Duration(w.HoldMax), time.Duration(w.QuietClose)
	return nil
}
