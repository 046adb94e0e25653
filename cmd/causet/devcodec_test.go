package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/internal/testenv"
)

// TestDevKafkaCodecServer: with CAUSET_PAYLOAD_KEYS set, `causet dev` runs a
// codec server beside the dev server it starts, and the UI it links is
// configured with it (the UI's own settings name it as its codec endpoint),
// so the UI shows plaintext. The codec server answers the UI's origin, and
// stops with the rest on Ctrl-C.
func TestDevKafkaCodecServer(t *testing.T) {
	if _, err := devstack.FindTemporalCLI(); err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	root := devRoot(t, "causet-dev-codec-")
	dev := startDev(t, append(devTestEnv(t, root), "CAUSET_PAYLOAD_KEYS=k7:"+codecTestKey(t)), "dev")
	banner := dev.waitBanner(t)
	codec := regexp.MustCompile(`Codec server +(http://127\.0\.0\.1:\d+) +payloads are encrypted \(key k7\)`).FindStringSubmatch(banner)
	require.NotNil(t, codec, "no codec server line:\n%s", banner)
	ui := regexp.MustCompile(`Temporal UI:\n +(http://\S+)/namespaces/`).FindStringSubmatch(banner)
	require.NotNil(t, ui, "no UI line:\n%s", banner)
	require.Regexp(t, `workflow show( --address \S+)? --codec-endpoint `+regexp.QuoteMeta(codec[1])+` -w projection-retry:`, banner)

	// The UI's settings, as the browser reads them, name the codec server.
	resp, err := http.Get(ui[1] + "/api/v1/settings")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var settings struct{ Codec struct{ Endpoint string } }
	require.NoError(t, json.Unmarshal(body, &settings), string(body))
	require.Equal(t, codec[1], settings.Codec.Endpoint, "the UI's codec endpoint")

	// It encodes with the key, and decodes for the UI's origin.
	post := func(path, body string) (*http.Response, string) {
		return testenv.Request(t, http.MethodPost, codec[1]+path, body, "Content-Type", "application/json", "Origin", ui[1])
	}
	plain := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) +
		`"},"data":"` + base64.StdEncoding.EncodeToString([]byte(`"dev-codec-secret"`)) + `"}]}`
	resp, enc := post("/encode", plain)
	require.Equal(t, http.StatusOK, resp.StatusCode, enc)
	var ps commonpb.Payloads
	require.NoError(t, protojson.Unmarshal([]byte(enc), &ps))
	require.Equal(t, "k7", string(ps.GetPayloads()[0].GetMetadata()["encryption-key-id"]))
	require.NotContains(t, enc, base64.StdEncoding.EncodeToString([]byte(`"dev-codec-secret"`)))
	resp, dec := post("/default/decode", enc)
	require.Equal(t, http.StatusOK, resp.StatusCode, dec)
	require.Equal(t, ui[1], resp.Header.Get("Access-Control-Allow-Origin"), "the UI's origin is allowed")
	require.NoError(t, protojson.Unmarshal([]byte(dec), &ps))
	require.Equal(t, `"dev-codec-secret"`, string(ps.GetPayloads()[0].GetData()))

	// Ctrl-C stops it with the rest.
	dev.interrupt(t)
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(codec[1], "http://"), time.Second)
	if err == nil {
		c.Close()
	}
	require.Error(t, err, "the codec server still listens")
}

func TestUIOrigins(t *testing.T) {
	require.Equal(t, []string{"http://127.0.0.1:8233", "http://localhost:8233"}, uiOrigins("http://127.0.0.1:8233"))
	require.Equal(t, []string{"http://localhost:41000", "http://127.0.0.1:41000"}, uiOrigins("http://localhost:41000/"))
	require.Equal(t, []string{"https://ui.example.com"}, uiOrigins("https://ui.example.com/namespaces"))
}
