package event

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const valid = `{"eventId":"01JE0001","eventType":"ARTIST_FOLLOWED","entityId":"user-123","forkId":"production",
"intentId":"i-1","sequence":42,"occurredAt":"2026-12-02T12:00:00Z","payload":{"artistId":"artist-9","plays":7,"ratio":0.5}}`

func TestDecodeValid(t *testing.T) {
	env, err := Decode([]byte(valid))
	require.NoError(t, err)
	require.Equal(t, "01JE0001", env.EventID)
	require.Equal(t, "ARTIST_FOLLOWED", env.EventType)
	require.Equal(t, "user-123", env.EntityID)
	require.Equal(t, "production", env.ForkID)
	require.EqualValues(t, 42, env.Sequence)
	require.Equal(t, 2026, env.OccurredAt.Year())

	fields, err := env.Fields()
	require.NoError(t, err)
	payload := fields["payload"].(map[string]any)
	require.Equal(t, int64(7), payload["plays"], "integral numbers are int64")
	require.Equal(t, 0.5, payload["ratio"])
	require.Equal(t, "artist-9", payload["artistId"])
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name, value, want string
	}{
		{"empty", ``, "empty record value"},
		{"not json", `hello`, "not a JSON envelope"},
		{"array", `[1,2]`, "not a JSON envelope"},
		{"missing eventId", `{"eventType":"A","entityId":"e","forkId":"f","payload":{}}`, "eventId is required"},
		{"blank entityId", `{"eventId":"1","eventType":"A","entityId":"  ","forkId":"f","payload":{}}`, "entityId is required"},
		{"missing forkId", `{"eventId":"1","eventType":"A","entityId":"e","payload":{}}`, "forkId is required"},
		{"eventId not string", `{"eventId":1,"eventType":"A","entityId":"e","forkId":"f","payload":{}}`, "not a JSON envelope"},
		{"payload missing", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f"}`, "payload is required"},
		{"payload array", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":[1]}`, "payload is required and must be a JSON object"},
		{"payload null", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":null}`, "payload is required"},
		{"trailing", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{}} {}`, "trailing data"},
		{"invalid utf8", "{\"eventId\":\"\xff\",\"eventType\":\"A\",\"entityId\":\"e\",\"forkId\":\"f\",\"payload\":{}}", "not valid UTF-8"},
		{"huge integer", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{"n":123456789012345678901234567890}}`, "does not fit a 64-bit integer"},
		{"huge float", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{"n":1e999}}`, "out of range"},
		{"deep nesting", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":` + strings.Repeat(`{"a":`, 10000) + `1` + strings.Repeat(`}`, 10000) + `}`, "nesting deeper"},
		{"too large", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{"s":"` + strings.Repeat("x", MaxSize) + `"}}`, "more than the"},
		{"bad occurredAt", `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","occurredAt":"yesterday","payload":{}}`, "not a JSON envelope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.value))
			require.Error(t, err)
			require.True(t, IsInvalid(err))
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBracesInStringsDoNotCountAsNesting(t *testing.T) {
	v := `{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{"s":"` + strings.Repeat(`{[\"`, 200) + `"}}`
	_, err := Decode([]byte(v))
	require.NoError(t, err)
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(`{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":{"a":[1,2,{"b":null}]}}`))
	f.Add([]byte(`{"payload":{"n":1e400}}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, value []byte) {
		env, err := Decode(value)
		if err != nil {
			if !IsInvalid(err) {
				t.Fatalf("decode error %v is not an InvalidError", err)
			}
			return
		}
		if env.EventID == "" || env.EventType == "" || env.EntityID == "" || env.ForkID == "" {
			t.Fatalf("accepted an envelope without required fields: %+v", env)
		}
		if _, err := env.Fields(); err != nil {
			t.Fatalf("accepted envelope has unusable fields: %v", err)
		}
	})
}

func TestDecodeChecksPayloadNumbersLikeFields(t *testing.T) {
	env := func(payload string) []byte {
		return []byte(`{"eventId":"1","eventType":"A","entityId":"e","forkId":"f","payload":` + payload + `}`)
	}
	for _, tc := range []struct {
		payload string
		want    string // "" when accepted
	}{
		{`{"s":"1e999","k":"99999999999999999999"}`, ""},
		{`{"quote\"":[-9223372036854775808, 9223372036854775807, 1.5e308, -0, 0.0, 1E-400]}`, ""},
		{`{"a":{"b":[1,{"c":9223372036854775808}]}}`, "does not fit a 64-bit integer"},
		{`{"esc\\":-1e999}`, "out of range"},
		{`{"t":true,"f":false,"n":null,"x":-12}`, ""},
	} {
		t.Run(tc.payload, func(t *testing.T) {
			got, err := Decode(env(tc.payload))
			if tc.want == "" {
				require.NoError(t, err)
				_, err = got.Fields()
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.True(t, IsInvalid(err))
		})
	}
}

// FuzzCheckNumbers: for valid JSON, checkNumbers accepts exactly what
// decoding the value (as Fields does) accepts.
func FuzzCheckNumbers(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1e999]`, `{"s":"9e9999"}`, `-9223372036854775809`, `{"\\"":[0.5,-0,1E+2]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || checkDepth(b) != nil {
			return
		}
		_, decodeErr := decodeValue(b)
		checkErr := checkNumbers(b)
		if (decodeErr == nil) != (checkErr == nil) {
			t.Fatalf("%q: decoding says %v, checkNumbers says %v", b, decodeErr, checkErr)
		}
	})
}
