package event

import (
	"encoding/json"
	"fmt"
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
		if len(env.EventID) > MaxEventIDBytes || len(env.EventType) > MaxEventTypeBytes || len(env.EntityID) > MaxEntityIDBytes ||
			len(env.ForkID) > MaxForkIDBytes || len(env.IntentID) > MaxIntentIDBytes {
			t.Fatalf("accepted an envelope over a field limit: %+v", env)
		}
		for _, s := range []string{env.EventID, env.EventType, env.EntityID, env.ForkID, env.IntentID} {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted a field with NUL: %q", s)
			}
		}
		if _, err := env.Fields(); err != nil {
			t.Fatalf("accepted envelope has unusable fields: %v", err)
		}
		if n := EncodedSize(env.Payload); n > MaxEncodedPayloadBytes {
			t.Fatalf("accepted a payload that encodes to %d bytes", n)
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
		if !json.Valid(b) || CheckBytes(b) != nil {
			return
		}
		_, decodeErr := decodeValue(b)
		checkErr := checkNumbers(b)
		if (decodeErr == nil) != (checkErr == nil) {
			t.Fatalf("%q: decoding says %v, checkNumbers says %v", b, decodeErr, checkErr)
		}
	})
}

// envelope is a valid record whose field name is set to value, raw JSON.
func envelope(name, value string) string {
	fields := map[string]string{"eventId": `"1"`, "eventType": `"A"`, "entityId": `"e"`, "forkId": `"f"`, "payload": `{}`}
	fields[name] = value
	var b strings.Builder
	b.WriteString("{")
	for i, k := range []string{"eventId", "eventType", "entityId", "forkId", "intentId", "payload"} {
		if v, ok := fields[k]; ok {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + k + `":` + v)
		}
	}
	b.WriteString("}")
	return b.String()
}

func TestDecodeRefusesNUL(t *testing.T) {
	tests := []struct {
		name, value, want string // want "" when accepted
	}{
		{"eventId", envelope("eventId", `"a\u0000b"`), `NUL (\u0000) at offset 13`},
		{"eventType", envelope("eventType", `"\u0000"`), "NUL (\\u0000)"},
		{"entityId", envelope("entityId", `"e\u0000"`), "NUL (\\u0000)"},
		{"forkId", envelope("forkId", `"\u0000f"`), "NUL (\\u0000)"},
		{"intentId", envelope("intentId", `"i\u0000"`), "NUL (\\u0000)"},
		{"payload value", envelope("payload", `{"a":{"b":["x\u0000"]}}`), "NUL (\\u0000)"},
		{"payload key", envelope("payload", `{"\u0000":1}`), "NUL (\\u0000)"},
		{"unknown field", `{"x\u0000":1,` + envelope("eventId", `"1"`)[1:], "NUL (\\u0000)"},
		{"after an escaped backslash", envelope("eventId", `"\\\u0000"`), "NUL (\\u0000)"},
		{"raw 0 byte", envelope("eventId", "\"a\x00\""), "NUL byte at offset 13"},
		{"escaped backslash before u0000", envelope("eventId", `"\\u0000"`), ""},
		{"other control escape", envelope("payload", `{"a":"\u0001\u0010"}`), ""},
		{"u0000 as text", envelope("payload", `{"u0000":"\\u0000"}`), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.value))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.True(t, IsInvalid(err))
		})
	}
}

func TestDecodeFieldLimits(t *testing.T) {
	tests := []struct {
		field string
		max   int
	}{
		{"eventId", MaxEventIDBytes},
		{"eventType", MaxEventTypeBytes},
		{"entityId", MaxEntityIDBytes},
		{"forkId", MaxForkIDBytes},
		{"intentId", MaxIntentIDBytes},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			_, err := Decode([]byte(envelope(tc.field, `"`+strings.Repeat("x", tc.max)+`"`)))
			require.NoError(t, err, "at the limit")

			_, err = Decode([]byte(envelope(tc.field, `"`+strings.Repeat("x", tc.max+1)+`"`)))
			require.ErrorContains(t, err, fmt.Sprintf("%s is %d bytes, more than the %d allowed", tc.field, tc.max+1, tc.max))
			require.True(t, IsInvalid(err))

			// Limits are in bytes, not characters.
			_, err = Decode([]byte(envelope(tc.field, `"x`+strings.Repeat("é", tc.max/2)+`"`)))
			require.ErrorContains(t, err, fmt.Sprintf("%s is %d bytes", tc.field, tc.max+1))
		})
	}
}

func TestDecodeEncodedPayloadLimit(t *testing.T) {
	// str is a payload {"s":"…"} whose string holds n copies of s.
	str := func(s string, n int) string { return `{"s":"` + strings.Repeat(s, n) + `"}` }
	fill := MaxEncodedPayloadBytes - len(str("", 0))
	tests := []struct {
		name, payload string
		wantSize      int // the encoded size in the error; 0 when accepted
	}{
		{"at the limit", str("x", fill), 0},
		{"one byte over", str("x", fill+1), MaxEncodedPayloadBytes + 1},
		{"350 KB of < is 2.1 MB encoded", str("<", 350_000), len(str("", 0)) + 6*350_000},
		{"350 KB of x", str("x", 350_000), 0},
		{"& and > count 6", str("&>", fill/12+1), len(str("", 0)) + 12*(fill/12+1)},
		{"U+2028 counts 6", str("\u2028", fill/6+1), len(str("", 0)) + 6*(fill/6+1)},
		{"escaped < counts as written", str(`\u003c`, fill/6), 0},
		{"whitespace between tokens is free", "{\n  " + strings.Repeat(" ", 400<<10) + `"s" : "` + strings.Repeat("x", fill) + "\"\n}", 0},
		{"spaces in strings count", str(" ", fill+1), MaxEncodedPayloadBytes + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			value := []byte(envelope("payload", tc.payload))
			require.LessOrEqual(t, len(value), MaxSize)
			_, err := Decode(value)
			if tc.wantSize == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, fmt.Sprintf("payload encodes to %d bytes as a workflow input, more than the %d allowed", tc.wantSize, MaxEncodedPayloadBytes))
			require.True(t, IsInvalid(err))
		})
	}
}

func TestEncodedSize(t *testing.T) {
	tests := []struct {
		raw  string
		want int
	}{
		{`{}`, 2},
		{` { "a" : [ 1 , 2 ] } `, len(`{"a":[1,2]}`)},
		{`{"a b":"c d"}`, len(`{"a b":"c d"}`)},
		{`{"<":"a&b>"}`, len(`{"\u003c":"a\u0026b\u003e"}`)},
		{`{"q":"\"<\\"}`, len(`{"q":"\"\u003c\\"}`)},
		{"{\"s\":\"\u2028\u2029\u2027\"}", len(`{"s":"\u2028\u2029`) + 3 + 2},
		{"[\"\\\\\", \" \"]", len(`["\\"," "]`)},
		{"{\"é\":\"ü\"}\n", len("{\"é\":\"ü\"}")},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			require.True(t, json.Valid([]byte(tc.raw)))
			require.Equal(t, tc.want, EncodedSize([]byte(tc.raw)))
			enc, err := json.Marshal(json.RawMessage(tc.raw))
			require.NoError(t, err)
			require.Len(t, enc, tc.want, "as encoding/json encodes it")
		})
	}
}

// FuzzEncodedSize: for valid JSON, EncodedSize is the length encoding/json
// gives the value as a json.RawMessage (what the SDK's converter writes).
func FuzzEncodedSize(f *testing.F) {
	for _, s := range []string{`{"a":"<>&"}`, " [ 1 ,\t2 ]\n", "\"\u2028\u2029\"", `"\\\"<"`, valid} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		enc, err := json.Marshal(json.RawMessage(b))
		if err != nil {
			t.Fatal(err)
		}
		if got := EncodedSize(b); got != len(enc) {
			t.Fatalf("%q: EncodedSize %d, encoding/json %d bytes", b, got, len(enc))
		}
	})
}
