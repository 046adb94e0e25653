package config

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
)

// Variables of the payload encryption keys.
const (
	EnvPayloadKeys       = "CAUSET_PAYLOAD_KEYS"
	EnvPayloadKeysFile   = "CAUSET_PAYLOAD_KEYS_FILE"
	EnvPayloadKeyCurrent = "CAUSET_PAYLOAD_KEY_CURRENT"
)

// PayloadKeySize is the length of an AES-256 key.
const PayloadKeySize = 32

// maxPayloadKeyID keeps a key ID short: it is stored in every payload's
// metadata.
const maxPayloadKeyID = 64

// maxPayloadKeysFile bounds what CAUSET_PAYLOAD_KEYS_FILE may hold.
const maxPayloadKeysFile = 1 << 20

// PayloadKey is one AES-256 key and the ID stored with what it encrypts.
type PayloadKey struct {
	ID  string
	Key []byte
}

// String names the key, never its material.
func (k PayloadKey) String() string { return fmt.Sprintf("PayloadKey{ID:%q}", k.ID) }

// GoString is String.
func (k PayloadKey) GoString() string { return k.String() }

// LogValue is the key's ID.
func (k PayloadKey) LogValue() slog.Value { return slog.StringValue(k.ID) }

// MarshalJSON encodes the key's ID only.
func (k PayloadKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID string `json:"id"`
	}{k.ID})
}

// PayloadKeys are the keys that encrypt the payloads of Temporal histories
// (package payloadcodec). It is read from the environment by
// [LoadPayloadKeys]:
//
//	variable                    meaning
//	CAUSET_PAYLOAD_KEYS         id:base64key entries separated by commas (or newlines);
//	                            each key 32 bytes (AES-256), e.g. `openssl rand -base64 32`
//	CAUSET_PAYLOAD_KEYS_FILE    a file of the same entries, one per line (blank lines and
//	                            lines starting with # are skipped): a mounted secret
//	CAUSET_PAYLOAD_KEY_CURRENT  the ID that encrypts; unset or empty: the first entry
//
// With neither CAUSET_PAYLOAD_KEYS nor CAUSET_PAYLOAD_KEYS_FILE set,
// encryption is off. Every key decrypts; only the current one encrypts, so
// keys are rotated by adding a new current key and keeping the old ones until
// no history that they encrypted is kept any more.
//
// No error, String, GoString, LogValue or MarshalJSON holds key material.
type PayloadKeys struct {
	// Keys in the order configured; empty when encryption is off.
	Keys []PayloadKey
	// Current is the ID of the key that encrypts.
	Current string
}

// Enabled reports whether payloads are encrypted.
func (k PayloadKeys) Enabled() bool { return len(k.Keys) > 0 }

// IDs are the configured key IDs, in order.
func (k PayloadKeys) IDs() []string {
	ids := make([]string, len(k.Keys))
	for i, key := range k.Keys {
		ids[i] = key.ID
	}
	return ids
}

// String names the keys and the current one, never their material.
func (k PayloadKeys) String() string {
	if !k.Enabled() {
		return "PayloadKeys{off}"
	}
	return fmt.Sprintf("PayloadKeys{Current:%q IDs:%q}", k.Current, k.IDs())
}

// GoString is String, so %#v does not print key material either.
func (k PayloadKeys) GoString() string { return k.String() }

// LogValue implements slog.LogValuer without key material.
func (k PayloadKeys) LogValue() slog.Value {
	return slog.GroupValue(slog.String("current", k.Current), slog.Any("keyIds", k.IDs()))
}

// MarshalJSON encodes what LogValue does.
func (k PayloadKeys) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Current string   `json:"current,omitempty"`
		IDs     []string `json:"keyIds"`
	}{k.Current, k.IDs()})
}

// PayloadKeysFromEnv reads the process environment.
func PayloadKeysFromEnv() (PayloadKeys, error) { return LoadPayloadKeys(os.LookupEnv) }

// LoadPayloadKeys reads CAUSET_PAYLOAD_KEYS or CAUSET_PAYLOAD_KEYS_FILE and
// CAUSET_PAYLOAD_KEY_CURRENT through lookup. Its error is one line naming the
// variable (and the entry or line, and the key ID when there is one); it never
// holds key material.
func LoadPayloadKeys(lookup Lookup) (PayloadKeys, error) {
	inline, inlineSet := lookup(EnvPayloadKeys)
	path, fileSet := lookup(EnvPayloadKeysFile)
	current, currentSet := lookup(EnvPayloadKeyCurrent)
	current = strings.TrimSpace(current)
	currentSet = currentSet && current != "" // empty: the default, the first key
	path = strings.TrimSpace(path)

	var (
		keys []PayloadKey
		err  error
	)
	switch {
	case inlineSet && fileSet:
		return PayloadKeys{}, fmt.Errorf("%s and %s are both set: set one of them", EnvPayloadKeys, EnvPayloadKeysFile)
	case inlineSet:
		if strings.TrimSpace(inline) == "" {
			// An empty secret must not turn encryption off unnoticed.
			return PayloadKeys{}, fmt.Errorf("%s is set but empty: want id:base64key entries, or unset it to run without payload encryption", EnvPayloadKeys)
		}
		keys, err = parsePayloadKeys(EnvPayloadKeys, inline, false)
	case fileSet:
		if path == "" {
			return PayloadKeys{}, fmt.Errorf("%s is set but empty: want the path of a file of id:base64key lines, or unset it to run without payload encryption", EnvPayloadKeysFile)
		}
		keys, err = readPayloadKeysFile(path)
	default:
		if currentSet {
			return PayloadKeys{}, fmt.Errorf("%s is set but neither %s nor %s is: there are no keys to choose from", EnvPayloadKeyCurrent, EnvPayloadKeys, EnvPayloadKeysFile)
		}
		return PayloadKeys{}, nil
	}
	if err != nil {
		return PayloadKeys{}, err
	}
	out := PayloadKeys{Keys: keys, Current: keys[0].ID}
	if currentSet {
		if !slices.ContainsFunc(keys, func(k PayloadKey) bool { return k.ID == current }) {
			return PayloadKeys{}, fmt.Errorf("%s=%q is invalid: want one of the configured key IDs (%s)", EnvPayloadKeyCurrent, current, strings.Join(out.IDs(), ", "))
		}
		out.Current = current
	}
	return out, nil
}

func readPayloadKeysFile(path string) ([]PayloadKey, error) {
	name := fmt.Sprintf("%s=%q", EnvPayloadKeysFile, path)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s is invalid: want a readable file of id:base64key lines: %w", name, pathCause(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPayloadKeysFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s is invalid: want a readable file of id:base64key lines: %w", name, pathCause(err))
	}
	if len(data) > maxPayloadKeysFile {
		return nil, fmt.Errorf("%s is invalid: the file is larger than 1 MiB", name)
	}
	return parsePayloadKeys(name, string(data), true)
}

// pathCause drops the path that *os.PathError repeats.
func pathCause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parsePayloadKeys reads id:base64key entries separated by commas or
// newlines; in a file (lines) each is numbered by its line, and blank lines
// and # comments are skipped. name prefixes every error.
func parsePayloadKeys(name, text string, lines bool) ([]PayloadKey, error) {
	type entry struct {
		where string
		text  string
	}
	var entries []entry
	n := 0
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if lines && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		for _, e := range strings.Split(line, ",") {
			if e = strings.TrimSpace(e); e == "" {
				continue
			}
			n++
			where := fmt.Sprintf("entry %d", n)
			if lines {
				where = fmt.Sprintf("line %d", i+1)
			}
			entries = append(entries, entry{where, e})
		}
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s is invalid: it holds no id:base64key entry", name)
	}
	const want = "want 32 random bytes in base64, such as from openssl rand -base64 32"
	seen := map[string]string{}
	keys := make([]PayloadKey, 0, len(entries))
	for _, e := range entries {
		// Never echo an entry or an invalid ID: either may be key material.
		id, b64, ok := strings.Cut(e.text, ":")
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		if !ok {
			return nil, fmt.Errorf("%s is invalid: %s has no key ID: want id:base64key", name, e.where)
		}
		if !validKeyID(id) {
			return nil, fmt.Errorf("%s is invalid: %s has an invalid key ID: want 1 to %d of the characters a-z A-Z 0-9 . _ -", name, e.where, maxPayloadKeyID)
		}
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s is invalid: key ID %q appears twice (%s and %s): want each ID once", name, id, prev, e.where)
		}
		seen[id] = e.where
		key, ok := decodeKey(b64)
		if !ok {
			return nil, fmt.Errorf("%s is invalid: %s (key ID %q) is not valid base64: %s", name, e.where, id, want)
		}
		if len(key) != PayloadKeySize {
			return nil, fmt.Errorf("%s is invalid: %s (key ID %q) is %d bytes, not %d (AES-256): %s", name, e.where, id, len(key), PayloadKeySize, want)
		}
		keys = append(keys, PayloadKey{ID: id, Key: key})
	}
	return keys, nil
}

// decodeKey accepts standard or URL-safe base64, padded or not.
func decodeKey(s string) ([]byte, bool) {
	if s == "" {
		return nil, false
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.Strict().DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

func validKeyID(id string) bool {
	if id == "" || len(id) > maxPayloadKeyID {
		return false
	}
	return strings.IndexFunc(id, func(r rune) bool {
		return !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0
}
