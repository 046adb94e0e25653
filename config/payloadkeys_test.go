package config

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func payloadEnv(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// testKey is n bytes of b in standard base64.
func testKey(b byte, n int) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, n))
}

func writeKeysFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestLoadPayloadKeys(t *testing.T) {
	k1, k2 := testKey(1, 32), testKey(2, 32)
	raw2 := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))

	off, err := LoadPayloadKeys(payloadEnv())
	require.NoError(t, err)
	require.False(t, off.Enabled(), "nothing set: encryption is off")

	got, err := LoadPayloadKeys(payloadEnv(EnvPayloadKeys, " k1:"+k1+" , k2:"+raw2+" "))
	require.NoError(t, err)
	require.True(t, got.Enabled())
	require.Equal(t, "k1", got.Current, "the first key is current by default")
	require.Equal(t, []string{"k1", "k2"}, got.IDs())
	require.Equal(t, bytes.Repeat([]byte{1}, 32), got.Keys[0].Key)
	require.Equal(t, bytes.Repeat([]byte{2}, 32), got.Keys[1].Key, "URL-safe base64 without padding is accepted")

	got, err = LoadPayloadKeys(payloadEnv(EnvPayloadKeys, "k1:"+k1+",k2:"+k2, EnvPayloadKeyCurrent, "k2"))
	require.NoError(t, err)
	require.Equal(t, "k2", got.Current)
	got, err = LoadPayloadKeys(payloadEnv(EnvPayloadKeys, "k1:"+k1+",k2:"+k2, EnvPayloadKeyCurrent, " "))
	require.NoError(t, err)
	require.Equal(t, "k1", got.Current, "an empty CAUSET_PAYLOAD_KEY_CURRENT is the default")
	off, err = LoadPayloadKeys(payloadEnv(EnvPayloadKeyCurrent, ""))
	require.NoError(t, err)
	require.False(t, off.Enabled())

	file := writeKeysFile(t, "# rotated 2026-12\r\nk2:"+k2+"\r\n\r\nk1:"+k1+"\n")
	got, err = LoadPayloadKeys(payloadEnv(EnvPayloadKeysFile, file))
	require.NoError(t, err)
	require.Equal(t, []string{"k2", "k1"}, got.IDs(), "comments and blank lines skipped, CRLF accepted")
	require.Equal(t, "k2", got.Current)
}

func TestLoadPayloadKeysErrors(t *testing.T) {
	k1 := testKey(1, 32)
	short := testKey(7, 16)
	good := writeKeysFile(t, "k1:"+k1+"\n")
	tests := []struct {
		name string
		env  Lookup
		want string
	}{
		{"env and file", payloadEnv(EnvPayloadKeys, "k1:"+k1, EnvPayloadKeysFile, good),
			"CAUSET_PAYLOAD_KEYS and CAUSET_PAYLOAD_KEYS_FILE are both set: set one of them"},
		{"empty env", payloadEnv(EnvPayloadKeys, "  "),
			"CAUSET_PAYLOAD_KEYS is set but empty: want id:base64key entries, or unset it to run without payload encryption"},
		{"only commas", payloadEnv(EnvPayloadKeys, ", ,"),
			"CAUSET_PAYLOAD_KEYS is invalid: it holds no id:base64key entry"},
		{"empty file path", payloadEnv(EnvPayloadKeysFile, ""),
			"CAUSET_PAYLOAD_KEYS_FILE is set but empty"},
		{"missing file", payloadEnv(EnvPayloadKeysFile, "/nonexistent/keys"),
			`CAUSET_PAYLOAD_KEYS_FILE="/nonexistent/keys" is invalid: want a readable file of id:base64key lines: no such file or directory`},
		{"file of comments", payloadEnv(EnvPayloadKeysFile, writeKeysFile(t, "# nothing yet\n\n")),
			"is invalid: it holds no id:base64key entry"},
		{"current without keys", payloadEnv(EnvPayloadKeyCurrent, "k1"),
			"CAUSET_PAYLOAD_KEY_CURRENT is set but neither CAUSET_PAYLOAD_KEYS nor CAUSET_PAYLOAD_KEYS_FILE is"},
		{"current unknown", payloadEnv(EnvPayloadKeys, "k1:"+k1, EnvPayloadKeyCurrent, "k9"),
			`CAUSET_PAYLOAD_KEY_CURRENT="k9" is invalid: want one of the configured key IDs (k1)`},
		{"no id", payloadEnv(EnvPayloadKeys, k1),
			"CAUSET_PAYLOAD_KEYS is invalid: entry 1 has no key ID: want id:base64key"},
		{"empty id", payloadEnv(EnvPayloadKeys, ":"+k1),
			"CAUSET_PAYLOAD_KEYS is invalid: entry 1 has an invalid key ID"},
		{"bad id", payloadEnv(EnvPayloadKeys, "k1:"+k1+",key one:"+k1),
			"CAUSET_PAYLOAD_KEYS is invalid: entry 2 has an invalid key ID: want 1 to 64 of the characters a-z A-Z 0-9 . _ -"},
		{"bad base64", payloadEnv(EnvPayloadKeys, "k1:"+k1+",k2:not*base64!"),
			`CAUSET_PAYLOAD_KEYS is invalid: entry 2 (key ID "k2") is not valid base64`},
		{"empty key", payloadEnv(EnvPayloadKeys, "k1:"),
			`CAUSET_PAYLOAD_KEYS is invalid: entry 1 (key ID "k1") is not valid base64`},
		{"short key", payloadEnv(EnvPayloadKeys, "k1:"+short),
			`CAUSET_PAYLOAD_KEYS is invalid: entry 1 (key ID "k1") is 16 bytes, not 32 (AES-256): want 32 random bytes in base64, such as from openssl rand -base64 32`},
		{"long key", payloadEnv(EnvPayloadKeys, "k1:"+testKey(7, 33)),
			`entry 1 (key ID "k1") is 33 bytes, not 32 (AES-256)`},
		{"duplicate id", payloadEnv(EnvPayloadKeys, "k1:"+k1+",k2:"+k1+",k1:"+testKey(3, 32)),
			`CAUSET_PAYLOAD_KEYS is invalid: key ID "k1" appears twice (entry 1 and entry 3): want each ID once`},
		{"file line numbers", payloadEnv(EnvPayloadKeysFile, writeKeysFile(t, "# keys\nk1:"+k1+"\n\nk2:"+short+"\n")),
			`is invalid: line 4 (key ID "k2") is 16 bytes, not 32 (AES-256)`},
		{"file duplicate", payloadEnv(EnvPayloadKeysFile, writeKeysFile(t, "k1:"+k1+"\nk1:"+k1+"\n")),
			`key ID "k1" appears twice (line 1 and line 2)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPayloadKeys(tc.env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
			for _, secret := range []string{k1, short, strings.TrimRight(k1, "=")} {
				require.NotContains(t, err.Error(), secret, "never echoes key material")
			}
		})
	}
}

// An entry written the wrong way round (key first) is refused without
// echoing the part taken for an ID: it is the key.
func TestLoadPayloadKeysNeverEchoesAMisplacedKey(t *testing.T) {
	key := testKey(9, 32)
	_, err := LoadPayloadKeys(payloadEnv(EnvPayloadKeys, key+":k1"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), strings.TrimRight(key, "="))
	require.Contains(t, err.Error(), "entry 1 has an invalid key ID")
}

func TestPayloadKeysRedacted(t *testing.T) {
	k1 := testKey(1, 32)
	keys, err := LoadPayloadKeys(payloadEnv(EnvPayloadKeys, "k1:"+k1+",k2:"+testKey(2, 32), EnvPayloadKeyCurrent, "k2"))
	require.NoError(t, err)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "keys", keys)
	js, err := json.Marshal(keys)
	require.NoError(t, err)
	one, err := json.Marshal(keys.Keys[0])
	require.NoError(t, err)
	for _, out := range []string{fmt.Sprint(keys), fmt.Sprintf("%+v", keys), fmt.Sprintf("%#v", keys), logged.String(), string(js),
		fmt.Sprintf("%v %+v %#v", keys.Keys, keys.Keys[0], keys.Keys[1]), string(one)} {
		require.Contains(t, out, "k")
		require.NotContains(t, out, strings.TrimRight(k1, "="))
		require.NotContains(t, out, "AQEBAQEB", "no base64 of the key bytes")
	}
	require.Equal(t, `{"current":"k2","keyIds":["k1","k2"]}`, string(js))
	require.Equal(t, "PayloadKeys{off}", PayloadKeys{}.String())
}
