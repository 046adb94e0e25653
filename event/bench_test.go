package event

import (
	"strings"
	"testing"
)

// BenchmarkDecode measures Decode, which runs on every record the bridge
// consumes, on a typical event and on large payloads.
func BenchmarkDecode(b *testing.B) {
	head := `{"eventId":"01JE0001","eventType":"ARTIST_FOLLOWED","entityId":"user-123","forkId":"production","payload":`
	for _, bc := range []struct{ name, value string }{
		{"small", valid},
		{"strings_100KiB", head + `{"s":"` + strings.Repeat("abcdefgh", 100<<10/8) + `"}}`},
		{"numbers_100KiB", head + `{"a":[` + strings.Repeat("12345,", 100<<10/6) + `1]}}`},
		{"objects_400KiB", head + `{"a":[` + strings.Repeat(`{"k":"v<w","n":1.5},`, 400<<10/20) + `{}]}}`},
	} {
		v := []byte(bc.value)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodedSize measures the scan Decode runs over the payload and
// the bridge may run over record values.
func BenchmarkEncodedSize(b *testing.B) {
	v := []byte(`{"a":[` + strings.Repeat(`{"k":"v<w x","n":1.5}, `, 400<<10/24) + `{}]}`)
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		EncodedSize(v)
	}
}
