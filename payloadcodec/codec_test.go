package payloadcodec_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/payloadcodec"
)

func rawKey(b byte) []byte { return bytes.Repeat([]byte{b}, config.PayloadKeySize) }

// keys builds PayloadKeys of id → fill byte, current first.
func keys(t *testing.T, current string, ids ...string) config.PayloadKeys {
	t.Helper()
	k := config.PayloadKeys{Current: current}
	for i, id := range ids {
		k.Keys = append(k.Keys, config.PayloadKey{ID: id, Key: rawKey(byte(i + 1))})
	}
	return k
}

func newCodec(t *testing.T, k config.PayloadKeys) *payloadcodec.Codec {
	t.Helper()
	c, err := payloadcodec.New(k)
	require.NoError(t, err)
	return c
}

const secret = "artist-secret-4be1c9"

type event struct {
	EventID string         `json:"eventId"`
	Payload map[string]any `json:"payload"`
}

func plainPayloads(t *testing.T) []*commonpb.Payload {
	t.Helper()
	ps, err := converter.GetDefaultDataConverter().ToPayloads(event{EventID: "e1", Payload: map[string]any{"artistId": secret}}, "second", nil)
	require.NoError(t, err)
	return ps.GetPayloads()
}

// Encode then decode gives the payloads back, each encrypted with its
// metadata; the payloads passed in are left as they were.
func TestCodecRoundTrip(t *testing.T) {
	c := newCodec(t, keys(t, "k1", "k1"))
	in := plainPayloads(t)
	orig := make([]*commonpb.Payload, len(in))
	for i, p := range in {
		orig[i] = proto.Clone(p).(*commonpb.Payload)
	}

	enc, err := c.Encode(in)
	require.NoError(t, err)
	require.Len(t, enc, len(in))
	for i, p := range enc {
		require.Equal(t, map[string][]byte{"encoding": []byte("binary/encrypted"), "encryption-key-id": []byte("k1")}, p.GetMetadata())
		require.NotContains(t, string(p.GetData()), secret)
		require.NotContains(t, string(p.GetData()), "json/plain", "the inner metadata is encrypted too")
		require.True(t, proto.Equal(orig[i], in[i]), "Encode must not change its input")
	}

	dec, err := c.Decode(enc)
	require.NoError(t, err)
	require.Len(t, dec, len(in))
	for i := range dec {
		require.True(t, proto.Equal(orig[i], dec[i]), "payload %d round trip", i)
	}
}

// The format is that of Temporal's encryption sample: data is a 12-byte
// nonce followed by AES-256-GCM of the marshalled payload, without
// additional data, so another tool with the key can read it.
func TestCodecFormat(t *testing.T) {
	c := newCodec(t, keys(t, "k1", "k1"))
	in := plainPayloads(t)[:1]
	enc, err := c.Encode(in)
	require.NoError(t, err)
	block, err := aes.NewCipher(rawKey(1))
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	data := enc[0].GetData()
	plain, err := gcm.Open(nil, data[:12], data[12:], nil)
	require.NoError(t, err)
	var got commonpb.Payload
	require.NoError(t, proto.Unmarshal(plain, &got))
	require.True(t, proto.Equal(in[0], &got))
}

// Every encryption draws a new nonce: the same payload twice gives two
// different ciphertexts.
func TestCodecNonceIsRandom(t *testing.T) {
	c := newCodec(t, keys(t, "k1", "k1"))
	p := plainPayloads(t)[:1]
	seen := map[string]bool{}
	for range 100 {
		enc, err := c.Encode(p)
		require.NoError(t, err)
		nonce := string(enc[0].GetData()[:12])
		require.False(t, seen[nonce], "nonce repeated")
		seen[nonce] = true
	}
}

// Rotation: payloads written under k1 stay readable once k2 is current, and
// new ones are written under k2.
func TestCodecRotation(t *testing.T) {
	before := newCodec(t, keys(t, "k1", "k1"))
	old, err := before.Encode(plainPayloads(t))
	require.NoError(t, err)

	after := newCodec(t, keys(t, "k2", "k1", "k2"))
	require.Equal(t, "k2", after.Current())
	fresh, err := after.Encode(plainPayloads(t))
	require.NoError(t, err)
	require.Equal(t, "k2", string(fresh[0].GetMetadata()["encryption-key-id"]))

	for _, set := range [][]*commonpb.Payload{old, fresh, {old[0], fresh[1]}} {
		dec, err := after.Decode(set)
		require.NoError(t, err)
		var e event
		require.NoError(t, converter.GetDefaultDataConverter().FromPayload(dec[0], &e))
		require.Equal(t, secret, e.Payload["artistId"])
	}

	// The old process, without k2, cannot read what the new one wrote.
	_, err = before.Decode(fresh)
	var unknown *payloadcodec.UnknownKeyError
	require.ErrorAs(t, err, &unknown)
}

// A payload of a key ID that is not configured fails with an error that
// names it and the configured ones, and says where keys come from.
func TestCodecUnknownKeyID(t *testing.T) {
	writer := newCodec(t, keys(t, "k1", "k1"))
	enc, err := writer.Encode(plainPayloads(t))
	require.NoError(t, err)

	reader := newCodec(t, config.PayloadKeys{Current: "k2", Keys: []config.PayloadKey{{ID: "k2", Key: rawKey(2)}, {ID: "k3", Key: rawKey(3)}}})
	_, err = reader.Decode(enc)
	var unknown *payloadcodec.UnknownKeyError
	require.True(t, errors.As(err, &unknown))
	require.Equal(t, "k1", unknown.ID)
	require.EqualError(t, err, `payload codec: payload encrypted with key ID "k1", which is not among the configured keys (k2, k3): add it to CAUSET_PAYLOAD_KEYS or CAUSET_PAYLOAD_KEYS_FILE to decode it`)
}

// Any change to nonce, ciphertext or tag, a truncated payload, or a key ID
// relabelled to another configured key fails authentication; nothing of the
// payload or the key appears in the error.
func TestCodecTampered(t *testing.T) {
	c := newCodec(t, keys(t, "k1", "k1", "k2"))
	good, err := c.Encode(plainPayloads(t)[:1])
	require.NoError(t, err)
	n := len(good[0].GetData())

	mutate := func(f func(p *commonpb.Payload)) []*commonpb.Payload {
		p := proto.Clone(good[0]).(*commonpb.Payload)
		f(p)
		return []*commonpb.Payload{p}
	}
	tests := map[string]struct {
		payloads []*commonpb.Payload
		want     string
	}{
		"nonce bit":      {mutate(func(p *commonpb.Payload) { p.Data[0] ^= 1 }), `payload of key "k1" fails authentication`},
		"ciphertext bit": {mutate(func(p *commonpb.Payload) { p.Data[20] ^= 0x80 }), `payload of key "k1" fails authentication`},
		"tag bit":        {mutate(func(p *commonpb.Payload) { p.Data[n-1] ^= 1 }), `payload of key "k1" fails authentication`},
		"appended byte":  {mutate(func(p *commonpb.Payload) { p.Data = append(p.Data, 0) }), `payload of key "k1" fails authentication`},
		"truncated":      {mutate(func(p *commonpb.Payload) { p.Data = p.Data[:20] }), `payload of key "k1" is 20 bytes, shorter than a nonce and a tag`},
		"other key":      {mutate(func(p *commonpb.Payload) { p.Metadata["encryption-key-id"] = []byte("k2") }), `payload of key "k2" fails authentication`},
		"no key id":      {mutate(func(p *commonpb.Payload) { delete(p.Metadata, "encryption-key-id") }), "binary/encrypted payload without encryption-key-id metadata"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := c.Decode(tc.payloads)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, err.Error(), base64.StdEncoding.EncodeToString(rawKey(1))[:16])
		})
	}
}

// Payloads that are not binary/encrypted (histories from before encryption,
// a signal sent by the temporal CLI) pass through Decode as they are.
func TestCodecDecodePassesPlainPayloadsThrough(t *testing.T) {
	c := newCodec(t, keys(t, "k1", "k1"))
	in := plainPayloads(t)
	out, err := c.Decode(in)
	require.NoError(t, err)
	for i := range in {
		require.Same(t, in[i], out[i])
	}
}

// The data converter of the clients encrypts every value it converts; the
// SDK's default converter cannot read the result.
func TestDataConverter(t *testing.T) {
	dc := payloadcodec.DataConverter(newCodec(t, keys(t, "k1", "k1")))
	ps, err := dc.ToPayloads(event{EventID: "e1", Payload: map[string]any{"artistId": secret}})
	require.NoError(t, err)
	raw, err := proto.Marshal(ps)
	require.NoError(t, err)
	require.NotContains(t, string(raw), secret)
	require.NotContains(t, string(raw), "e1\"")

	var e event
	require.NoError(t, dc.FromPayloads(ps, &e))
	require.Equal(t, secret, e.Payload["artistId"])

	err = converter.GetDefaultDataConverter().FromPayloads(ps, &e)
	require.ErrorContains(t, err, "binary/encrypted")
}

// Without keys, values convert as with the SDK's default converter, and an
// encrypted payload fails with an error naming the variables to set.
func TestKeylessNamesTheMissingKeys(t *testing.T) {
	keyless := payloadcodec.Keyless()
	ps, err := keyless.ToPayloads(event{EventID: "e1", Payload: map[string]any{"artistId": secret}})
	require.NoError(t, err)
	plain, err := converter.GetDefaultDataConverter().ToPayloads(event{EventID: "e1", Payload: map[string]any{"artistId": secret}})
	require.NoError(t, err)
	require.True(t, proto.Equal(plain, ps), "written as the default converter writes it")
	var e event
	require.NoError(t, keyless.FromPayloads(ps, &e))
	require.Equal(t, secret, e.Payload["artistId"])

	enc, err := payloadcodec.DataConverter(newCodec(t, keys(t, "k1", "k1"))).ToPayloads(event{EventID: "e2"})
	require.NoError(t, err)
	err = keyless.FromPayloads(enc, &e)
	var noKeys *payloadcodec.NoKeysError
	require.True(t, errors.As(err, &noKeys), "%v", err)
	require.Equal(t, "k1", noKeys.ID)
	require.ErrorContains(t, err, `payload codec: payload encrypted with key ID "k1", and no keys are configured: set CAUSET_PAYLOAD_KEYS or CAUSET_PAYLOAD_KEYS_FILE to the keys the workers use to decode it`)
}

func TestNewRefusesBadKeys(t *testing.T) {
	_, err := payloadcodec.New(config.PayloadKeys{})
	require.EqualError(t, err, "payload codec: no keys configured")
	_, err = payloadcodec.New(config.PayloadKeys{Current: "k1", Keys: []config.PayloadKey{{ID: "k1", Key: []byte("short")}}})
	require.EqualError(t, err, `payload codec: key "k1" is 5 bytes, want 32`)
	_, err = payloadcodec.New(config.PayloadKeys{Current: "k9", Keys: []config.PayloadKey{{ID: "k1", Key: rawKey(1)}}})
	require.EqualError(t, err, `payload codec: current key "k9" is not among the keys`)
}

// BenchmarkCodec encrypts and decrypts one payload of a 1 KiB event.
func BenchmarkCodec(b *testing.B) {
	c, err := payloadcodec.New(config.PayloadKeys{Current: "k1", Keys: []config.PayloadKey{{ID: "k1", Key: rawKey(1)}}})
	require.NoError(b, err)
	p := []*commonpb.Payload{{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: bytes.Repeat([]byte("x"), 1024)}}
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		enc, err := c.Encode(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}
