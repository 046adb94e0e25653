package event_test

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
)

func TestPlainNumbers(t *testing.T) {
	cases := map[string]string{
		`{"a":1e-3}`:                  `{"a":0.001}`,
		`{"a":1.50e1,"b":"1e5"}`:      `{"a":15.0,"b":"1e5"}`,
		`{"a":-2.5E+2}`:               `{"a":-250}`,
		`{"a":0e-2,"b":-0.0e1}`:       `{"a":0.00,"b":0}`,
		`{"a":12e-1,"b":[1e2,3]}`:     `{"a":1.2,"b":[100,3]}`,
		`{"a":0.001e2}`:               `{"a":0.1}`,
		`{"k\"e":"x\\\"1e3","n":1.5}`: `{"k\"e":"x\\\"1e3","n":1.5}`,
		`{"a":1e21}`:                  `{"a":1000000000000000000000}`,
		`{"a":1.234e-7}`:              `{"a":0.0000001234}`,
	}
	for in, want := range cases {
		got, err := event.PlainNumbers([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(got), in)
		require.True(t, json.Valid(got), in)
	}
	tiny := `{"a":1e-300}`
	got, err := event.PlainNumbers([]byte(tiny))
	require.NoError(t, err)
	require.Equal(t, `{"a":0.`+strings.Repeat("0", 299)+`1}`, string(got))
	_, err = event.PlainNumbers([]byte(`{"a":1e999999999}`))
	require.True(t, event.IsInvalid(err), "a number that cannot be written out is invalid: %v", err)
}

// A careless client's 35 KB of 1e-300 becomes, written out, far more than
// an event may hold: checked in that form, the event is refused.
func TestPlainNumbersShowTheStoredSize(t *testing.T) {
	raw := `{"eventId":"e","eventType":"T","entityId":"x","forkId":"f","payload":{"xs":[` + strings.TrimSuffix(strings.Repeat("1e-300,", 5000), ",") + `]}}`
	_, err := event.Decode([]byte(raw))
	require.NoError(t, err, "as Go writes it the event is small")
	plain, err := event.PlainNumbers([]byte(raw))
	require.NoError(t, err)
	require.Greater(t, len(plain), 1_500_000)
	_, err = event.Decode(plain)
	require.True(t, event.IsInvalid(err))
}

// Accepted ⇒ publishable ⇒ decoded alike: a payload whose plain form the
// ledger accepts goes out as the relay re-encodes it (through Envelope) and
// the bridge decodes the same values; numbers keep their value exactly.
func FuzzPlainNumbers(f *testing.F) {
	for _, s := range []string{`{"a":1e-3}`, `{"a":[1.5E+2,-0e0,"1e9"]}`, `{"a":{"b":1e-300}}`, `{"a":12345678901234567890e-30}`,
		`{"a":"\"1e3\\\\",  "b" : 2E1 }`, `{"a":1e21}`, `{"a":-1.0e-0}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		if !json.Valid([]byte(payload)) {
			return
		}
		plain, err := event.PlainNumbers([]byte(payload))
		if err != nil {
			require.True(t, event.IsInvalid(err), "%v", err)
			return
		}
		require.True(t, json.Valid(plain), "%s → %s", payload, plain)
		require.NotContains(t, numbersOf(t, plain), "e", "every number is plain")
		if len(plain) < 4096 { // exact rationals of huge exponents take the fuzzer's time
			require.Equal(t, valuesOf(t, []byte(payload)), valuesOf(t, plain), "the same numbers, exactly")
		}
		env := event.Envelope{EventID: "e", EventType: "T", EntityID: "x", ForkID: "f", Payload: plain}
		raw, err := json.Marshal(env)
		if err != nil {
			return
		}
		if _, err := event.Decode(raw); err != nil {
			return // refused before it is stored
		}
		var relayed event.Envelope
		require.NoError(t, json.Unmarshal(raw, &relayed))
		value, err := json.Marshal(relayed)
		require.NoError(t, err)
		_, err = event.Decode(value)
		require.NoError(t, err, "what was accepted is what the relay publishes and the bridge decodes")
	})
}

// numbersOf is every number token of raw, lower-cased, joined by spaces.
func numbersOf(t *testing.T, raw []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out []string
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if n, ok := tok.(json.Number); ok {
			out = append(out, strings.ToLower(string(n)))
		}
	}
	return strings.Join(out, " ")
}

// valuesOf is every number of raw as an exact rational, in order.
func valuesOf(t *testing.T, raw []byte) []string {
	t.Helper()
	var out []string
	for _, n := range strings.Fields(numbersOf(t, raw)) {
		r, ok := new(big.Rat).SetString(n)
		require.True(t, ok, n)
		out = append(out, r.RatString())
	}
	return out
}
