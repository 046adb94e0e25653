package payloadcodec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/causet/projection-retry/config"
)

// Metadata of an encrypted payload (Temporal's encryption sample uses the same).
const (
	// EncodingEncrypted is the payload's encoding metadata.
	EncodingEncrypted = "binary/encrypted"
	// MetadataKeyID names the key that encrypted the payload.
	MetadataKeyID = "encryption-key-id"
)

const nonceSize = 12

// Codec is a converter.PayloadCodec; safe for concurrent use.
type Codec struct {
	current string
	aeads   map[string]cipher.AEAD
	ids     []string
	// encrypted counts payloads encrypted with the current key, failed the
	// Decode calls that failed (Stats).
	encrypted, failed atomic.Uint64
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New builds the codec of keys, which must be enabled (config.LoadPayloadKeys
// validated them).
func New(keys config.PayloadKeys) (*Codec, error) {
	if !keys.Enabled() {
		return nil, errors.New("payload codec: no keys configured")
	}
	c := &Codec{current: keys.Current, aeads: make(map[string]cipher.AEAD, len(keys.Keys)), ids: keys.IDs()}
	for _, k := range keys.Keys {
		if len(k.Key) != config.PayloadKeySize {
			return nil, fmt.Errorf("payload codec: key %q is %d bytes, want %d", k.ID, len(k.Key), config.PayloadKeySize)
		}
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("payload codec: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCMWithNonceSize(block, nonceSize)
		if err != nil {
			return nil, fmt.Errorf("payload codec: key %q: %w", k.ID, err)
		}
		c.aeads[k.ID] = aead
	}
	if _, ok := c.aeads[c.current]; !ok {
		return nil, fmt.Errorf("payload codec: current key %q is not among the keys", c.current)
	}
	return c, nil
}

// DataConverter is the SDK's default data converter with c encrypting what
// it produces: the one every Temporal client of the process uses.
func DataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// Current is the ID of the key that encrypts.
func (c *Codec) Current() string { return c.current }

// Stats are the payloads this codec encrypted (all with Current) and the
// Decode calls that failed, since it was built.
func (c *Codec) Stats() (encrypted, failed uint64) { return c.encrypted.Load(), c.failed.Load() }

// Encode encrypts every payload with the current key. The payloads passed
// in are not changed.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.aeads[c.current]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("payload codec: marshal payload: %w", err)
		}
		// Random nonces: at most 2^32 payloads per key keep the chance of a
		// repeated nonce negligible (docs/ENCRYPTION.md, rotation).
		buf := make([]byte, nonceSize, nonceSize+len(plain)+aead.Overhead())
		if _, err := rand.Read(buf); err != nil {
			return payloads, fmt.Errorf("payload codec: random nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(EncodingEncrypted),
				MetadataKeyID:              []byte(c.current),
			},
			Data: aead.Seal(buf, buf, plain, nil),
		}
	}
	c.encrypted.Add(uint64(len(payloads)))
	return out, nil
}

// Decode decrypts every binary/encrypted payload with the key its metadata
// names and passes the others through. A payload of an unknown key ID, a
// tampered one and one encrypted under other key material all fail. The
// payloads passed in are not changed.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out, err := c.decode(payloads)
	if err != nil {
		c.failed.Add(1)
	}
	return out, err
}

func (c *Codec) decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != EncodingEncrypted {
			out[i] = p
			continue
		}
		id, ok := p.GetMetadata()[MetadataKeyID]
		if !ok {
			return payloads, fmt.Errorf("payload codec: %s payload without %s metadata", EncodingEncrypted, MetadataKeyID)
		}
		aead, ok := c.aeads[string(id)]
		if !ok {
			return payloads, &UnknownKeyError{ID: string(id), Known: c.ids}
		}
		data := p.GetData()
		if len(data) < nonceSize+aead.Overhead() {
			return payloads, fmt.Errorf("payload codec: payload of key %q is %d bytes, shorter than a nonce and a tag", id, len(data))
		}
		plain, err := aead.Open(nil, data[:nonceSize], data[nonceSize:], nil)
		if err != nil {
			return payloads, fmt.Errorf("payload codec: payload of key %q fails authentication: altered, or encrypted under other key material with this ID", id)
		}
		dec := &commonpb.Payload{}
		if err := proto.Unmarshal(plain, dec); err != nil {
			return payloads, fmt.Errorf("payload codec: payload of key %q decrypts to no payload: %w", id, err)
		}
		out[i] = dec
	}
	return out, nil
}

// UnknownKeyError is a payload encrypted under a key ID this process does
// not have.
type UnknownKeyError struct {
	ID    string
	Known []string
}

func (e *UnknownKeyError) Error() string {
	id := e.ID
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return fmt.Sprintf("payload codec: payload encrypted with key ID %q, which is not among the configured keys (%s): add it to %s or %s to decode it",
		id, strings.Join(e.Known, ", "), config.EnvPayloadKeys, config.EnvPayloadKeysFile)
}

// Keyless is the data converter of a process without payload keys: it
// writes payloads as they are, and a payload that a process with keys
// encrypted fails to decode with an error that names the variables to set,
// instead of the SDK's "payload encoding is not supported".
func Keyless() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), keylessCodec{})
}

type keylessCodec struct{}

func (keylessCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return payloads, nil
}

func (keylessCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	for _, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) == EncodingEncrypted {
			return nil, &NoKeysError{ID: string(p.GetMetadata()[MetadataKeyID])}
		}
	}
	return payloads, nil
}

// NoKeysError is an encrypted payload met by a process without keys.
type NoKeysError struct{ ID string }

func (e *NoKeysError) Error() string {
	id := e.ID
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return fmt.Sprintf("payload codec: payload encrypted with key ID %q, and no keys are configured: set %s or %s to the keys the workers use to decode it",
		id, config.EnvPayloadKeys, config.EnvPayloadKeysFile)
}
