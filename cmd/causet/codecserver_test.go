package main

import (
	"encoding/base64"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/testenv"
)

func codecTestKey(t *testing.T) string {
	t.Helper()
	return testenv.RandomKey(t, config.PayloadKeySize)
}

func envLookup(kv ...string) config.Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadCodecServerSettings(t *testing.T) {
	key := codecTestKey(t)
	s, err := loadCodecServerSettings(envLookup("CAUSET_PAYLOAD_KEYS", "k1:"+key))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8081", s.Addr)
	require.Equal(t, []string{"http://localhost:8233", "http://127.0.0.1:8233"}, s.Origins)
	require.Equal(t, "k1", s.Keys.Current)

	s, err = loadCodecServerSettings(envLookup("CAUSET_PAYLOAD_KEYS", "k1:"+key, "CAUSET_CODEC_ADDR", "0.0.0.0:9000",
		"CAUSET_CODEC_CORS_ORIGIN", "https://temporal.example.com"))
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9000", s.Addr)
	require.Equal(t, []string{"https://temporal.example.com"}, s.Origins)

	for _, tc := range []struct {
		env  config.Lookup
		want string
	}{
		{envLookup(), "CAUSET_PAYLOAD_KEYS (or CAUSET_PAYLOAD_KEYS_FILE) is not set: the codec server needs the keys the workers encrypt with"},
		{envLookup("CAUSET_PAYLOAD_KEYS", "k1:short"), `CAUSET_PAYLOAD_KEYS is invalid: entry 1 (key ID "k1") is not valid base64`},
		{envLookup("CAUSET_PAYLOAD_KEYS", "k1:"+key, "CAUSET_CODEC_ADDR", "8081"), `CAUSET_CODEC_ADDR="8081" is invalid: want host:port`},
		{envLookup("CAUSET_PAYLOAD_KEYS", "k1:"+key, "CAUSET_CODEC_CORS_ORIGIN", "*"), `CAUSET_CODEC_CORS_ORIGIN is invalid: "*" is not allowed`},
		{envLookup("CAUSET_PAYLOAD_KEYS", "k1:"+key, "CAUSET_CODEC_CORS_ORIGIN", "localhost:8233"), `CAUSET_CODEC_CORS_ORIGIN is invalid: "localhost:8233" is not an origin`},
	} {
		_, err := loadCodecServerSettings(tc.env)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), key)
	}
}

// startCodecServer runs `causet codec-server` on addr with env and waits
// until it answers; stop interrupts it (also when the test ends).
func startCodecServer(t *testing.T, addr string, env ...string) (url string, stderr *testenv.LogBuffer, stop func()) {
	t.Helper()
	cmd := exec.Command(binary, "codec-server")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CAUSET_CODEC_ADDR=" + addr}, env...)
	stderr = &testenv.LogBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case err := <-exited:
				require.NoError(t, err, "codec server exit; stderr:\n%s", stderr)
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("codec server did not stop within 10s of SIGINT")
			}
		})
	}
	t.Cleanup(stop)
	url = "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, "codec server did not answer; stderr:\n%s", stderr)
	return url, stderr, stop
}

// `causet codec-server` serves /encode, /decode and the UI's preflight, and
// stops cleanly on SIGINT.
func TestCodecServerCommand(t *testing.T) {
	url, stderr, stop := startCodecServer(t, freeAddr(t), "CAUSET_PAYLOAD_KEYS=k1:"+codecTestKey(t)+",k2:"+codecTestKey(t),
		"CAUSET_PAYLOAD_KEY_CURRENT=k2", "CAUSET_CODEC_CORS_ORIGIN=http://127.0.0.1:8233")
	require.Contains(t, stderr.String(), `"msg":"codec server listening"`)
	require.Contains(t, stderr.String(), `"currentKeyId":"k2"`)

	body := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) +
		`"},"data":"` + base64.StdEncoding.EncodeToString([]byte(`"codec-command-secret"`)) + `"}]}`
	do := func(method, path, body string, header ...string) (*http.Response, string) {
		return testenv.Request(t, method, url+path, body, header...)
	}
	resp, enc := do(http.MethodPost, "/encode", body, "Content-Type", "application/json", "X-Namespace", "default")
	require.Equal(t, http.StatusOK, resp.StatusCode, enc)
	var ps commonpb.Payloads
	require.NoError(t, protojson.Unmarshal([]byte(enc), &ps))
	require.Equal(t, "binary/encrypted", string(ps.GetPayloads()[0].GetMetadata()["encoding"]))
	require.Equal(t, "k2", string(ps.GetPayloads()[0].GetMetadata()["encryption-key-id"]))

	resp, dec := do(http.MethodPost, "/default/decode", enc, "Content-Type", "application/json", "Origin", "http://127.0.0.1:8233")
	require.Equal(t, http.StatusOK, resp.StatusCode, dec)
	require.Equal(t, "http://127.0.0.1:8233", resp.Header.Get("Access-Control-Allow-Origin"))
	require.NoError(t, protojson.Unmarshal([]byte(dec), &ps))
	require.Equal(t, `"codec-command-secret"`, string(ps.GetPayloads()[0].GetData()))

	resp, _ = do(http.MethodOptions, "/decode", "", "Origin", "http://127.0.0.1:8233",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type,x-namespace")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "X-Namespace")

	stop() // SIGINT: exits 0
}

// Bad keys stop `causet codec-server` and `causet worker` at start with one
// line naming the variable, without the key.
func TestPayloadKeysRefusedAtStart(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key"))
	_, stderr, code := runBinary(t, []string{"CAUSET_PAYLOAD_KEYS=k1:" + short}, "codec-server")
	require.Equal(t, 1, code)
	require.Equal(t, `causet: CAUSET_PAYLOAD_KEYS is invalid: entry 1 (key ID "k1") is 16 bytes, not 32 (AES-256): want 32 random bytes in base64, such as from openssl rand -base64 32`, strings.TrimSpace(stderr))

	_, stderr, code = runBinary(t, nil, "codec-server")
	require.Equal(t, 1, code)
	require.Equal(t, "causet: CAUSET_PAYLOAD_KEYS (or CAUSET_PAYLOAD_KEYS_FILE) is not set: the codec server needs the keys the workers encrypt with", strings.TrimSpace(stderr))

	keyFile := t.TempDir() + "/keys"
	require.NoError(t, os.WriteFile(keyFile, []byte("k1:"+codecTestKey(t)+"\n"), 0o600))
	_, stderr, code = runBinary(t, []string{"CAUSET_PAYLOAD_KEYS=k1:" + codecTestKey(t), "CAUSET_PAYLOAD_KEYS_FILE=" + keyFile,
		"DATABASE_URL=" + testenv.PostgresURL(t)}, "worker")
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Equal(t, "causet: CAUSET_PAYLOAD_KEYS and CAUSET_PAYLOAD_KEYS_FILE are both set: set one of them", lines[len(lines)-1])

	_, stderr, code = runBinary(t, []string{"CAUSET_PAYLOAD_KEYS=k1:" + short, "TEMPORAL_ADDRESS=127.0.0.1:1"}, "dlq", "replay")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "causet: CAUSET_PAYLOAD_KEYS is invalid")
	require.NotContains(t, stderr, strings.TrimRight(short, "="))
}
