package payloadcodec_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/payloadcodec"
)

const uiOrigin = "http://localhost:8233"

func codecServer(t *testing.T, o payloadcodec.HandlerOptions) *httptest.Server {
	t.Helper()
	if o.Origins == nil {
		o.Origins = []string{uiOrigin}
	}
	srv := httptest.NewServer(payloadcodec.NewHandler(newCodec(t, keys(t, "k2", "k1", "k2")), o))
	t.Cleanup(srv.Close)
	return srv
}

// post sends body as the UI does, in JSON for the default namespace;
// header pairs are set after, overriding those.
func post(t *testing.T, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	return testenv.Request(t, http.MethodPost, url, body,
		append([]string{"Content-Type", "application/json", "X-Namespace", "default"}, header...)...)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// The body the UI and the CLI send: Payloads in protobuf JSON, bytes in
// base64.
var plainBody = `{"payloads":[{"metadata":{"encoding":"` + b64("json/plain") + `"},"data":"` + b64(`{"artistId":"`+secret+`"}`) + `"}]}`

// POST /encode encrypts with the current key; its answer POSTed to /decode
// gives the payload back, under any path prefix (/{namespace}/decode).
func TestHandlerEncodeDecode(t *testing.T) {
	srv := codecServer(t, payloadcodec.HandlerOptions{})
	resp, encoded := post(t, srv.URL+"/encode", plainBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, encoded)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.NotContains(t, encoded, b64(`{"artistId":"`+secret+`"}`))
	var enc commonpb.Payloads
	require.NoError(t, protojson.Unmarshal([]byte(encoded), &enc))
	require.Len(t, enc.GetPayloads(), 1)
	require.Equal(t, "binary/encrypted", string(enc.GetPayloads()[0].GetMetadata()["encoding"]))
	require.Equal(t, "k2", string(enc.GetPayloads()[0].GetMetadata()["encryption-key-id"]))

	for _, path := range []string{"/decode", "/default/decode"} {
		resp, decoded := post(t, srv.URL+path, encoded)
		require.Equal(t, http.StatusOK, resp.StatusCode, decoded)
		var dec commonpb.Payloads
		require.NoError(t, protojson.Unmarshal([]byte(decoded), &dec))
		require.Equal(t, "json/plain", string(dec.GetPayloads()[0].GetMetadata()["encoding"]))
		require.JSONEq(t, `{"artistId":"`+secret+`"}`, string(dec.GetPayloads()[0].GetData()))
	}
}

// The SDK's remote codec, which the temporal CLI's --codec-endpoint and
// envconfig's remote codec use, round-trips through the endpoint.
func TestHandlerServesSDKRemoteCodec(t *testing.T) {
	srv := codecServer(t, payloadcodec.HandlerOptions{})
	remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{Endpoint: srv.URL + "/default"})
	in := plainPayloads(t)
	enc, err := remote.Encode(in)
	require.NoError(t, err)
	require.Equal(t, "binary/encrypted", string(enc[0].GetMetadata()["encoding"]))
	dec, err := newCodec(t, keys(t, "k1", "k1", "k2")).Decode(enc)
	require.NoError(t, err, "what the endpoint encrypts, the workers decrypt")
	require.Equal(t, in[0].GetData(), dec[0].GetData())
	back, err := remote.Decode(enc)
	require.NoError(t, err)
	require.Equal(t, in[1].GetData(), back[1].GetData())
}

// The UI's preflight is answered for its origin with the headers it sends;
// another origin gets no CORS headers and is refused.
func TestHandlerCORSPreflight(t *testing.T) {
	srv := codecServer(t, payloadcodec.HandlerOptions{Origins: []string{"http://127.0.0.1:8233", uiOrigin}})
	preflight := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-namespace,authorization")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := preflight(uiOrigin)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, uiOrigin, resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "true", resp.Header.Get("Access-Control-Allow-Credentials"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "POST")
	for _, h := range []string{"Content-Type", "X-Namespace", "Authorization"} {
		require.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), h)
	}
	require.Contains(t, resp.Header.Values("Vary"), "Origin")

	resp = preflight("https://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

	// The request itself: allowed for the UI's origin, refused for another.
	ok, body := post(t, srv.URL+"/encode", plainBody, "Origin", "http://127.0.0.1:8233")
	require.Equal(t, http.StatusOK, ok.StatusCode, body)
	require.Equal(t, "http://127.0.0.1:8233", ok.Header.Get("Access-Control-Allow-Origin"))
	refused, body := post(t, srv.URL+"/encode", plainBody, "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, refused.StatusCode)
	require.NotContains(t, body, "binary")
}

// On a loopback listener a request whose Host is a DNS name (a name
// rebound to 127.0.0.1 by a web page) is refused.
func TestHandlerLoopbackHostOnly(t *testing.T) {
	srv := codecServer(t, payloadcodec.HandlerOptions{LoopbackHostOnly: true})
	resp, _ := post(t, srv.URL+"/encode", plainBody)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, tc := range []struct {
		host string
		want int
	}{
		{"rebound.example:8081", http.StatusForbidden},
		{"rebound.example", http.StatusForbidden},
		{"localhost:8081", http.StatusOK},
		{"[::1]:8081", http.StatusOK},
		{"127.0.0.2", http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/encode", strings.NewReader(plainBody))
		require.NoError(t, err)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, tc.host)
	}
}

func TestHandlerErrors(t *testing.T) {
	srv := codecServer(t, payloadcodec.HandlerOptions{MaxBodyBytes: 4096})

	// A payload of a key the server lacks: 400 naming the key ID.
	foreign, err := newCodec(t, keys(t, "k9", "k9")).Encode(plainPayloads(t)[:1])
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: foreign})
	require.NoError(t, err)
	resp, msg := post(t, srv.URL+"/decode", string(body))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, msg, `key ID "k9"`)

	resp, _ = post(t, srv.URL+"/decode", `{"payloads":`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, _ = post(t, srv.URL+"/encode", `{"payloads":[{"data":"`+strings.Repeat("A", 8000)+`"}]}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusMethodNotAllowed, get("/decode"))
	require.Equal(t, http.StatusNotFound, get("/other"))
	require.Equal(t, http.StatusOK, get("/healthz"))
}

func TestParseOrigins(t *testing.T) {
	got, err := payloadcodec.ParseOrigins(" http://localhost:8233 , https://Temporal.Example.com/ ,https://ui.example.com:443,http://x:80")
	require.NoError(t, err)
	require.Equal(t, []string{"http://localhost:8233", "https://temporal.example.com", "https://ui.example.com", "http://x"}, got)
	for _, bad := range []string{"", "*", "localhost:8233", "ftp://x", "http://x/ui", "http://x?y", "http://u@x"} {
		_, err := payloadcodec.ParseOrigins(bad)
		require.Error(t, err, bad)
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8081": true, "localhost:8081": true, "[::1]:8081": true,
		"0.0.0.0:8081": false, ":8081": false, "10.0.0.5:8081": false, "codec:8081": false,
	} {
		require.Equal(t, want, payloadcodec.IsLoopbackAddr(addr), addr)
	}
}
