package contract

import (
	"encoding/json"
	"time"

	"github.com/causet/projection-retry/config"
)

// ApplyInput is the ApplyProjection activity's input the UI shows on each
// activity: its delays read as duration strings ("2s"). Inputs scheduled
// before, with integer nanoseconds, still decode.

type applyInputFields ApplyInput

type applyInputJSON struct {
	applyInputFields
	Delays []config.Duration `json:"delays"`
}

// MarshalJSON writes in with its delays as duration strings.
func (in ApplyInput) MarshalJSON() ([]byte, error) {
	w := applyInputJSON{applyInputFields: applyInputFields(in)}
	for _, d := range in.Delays {
		w.Delays = append(w.Delays, config.Duration(d))
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads delays as duration strings or integer nanoseconds.
func (in *ApplyInput) UnmarshalJSON(b []byte) error {
	var w applyInputJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*in = ApplyInput(w.applyInputFields)
	in.Delays = nil
	for _, d := range w.Delays {
		in.Delays = append(in.Delays, time.Duration(d))
	}
	return nil
}
