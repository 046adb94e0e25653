package intentapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/intentapi"
)

const (
	writerSecret = "w-0123456789abcdef0123456789abcdef"
	readerSecret = "r-0123456789abcdef0123456789abcdef"
	bothSecret   = "b-0123456789abcdef0123456789abcdef"
)

// authed is the fixture's server with tokens.
func authed(t *testing.T, f *fixture, tokens *intentapi.Tokens) http.Handler {
	t.Helper()
	srv, err := intentapi.New(intentapi.Options{Catalog: f.catalog, Ledger: f.ledger, Auth: tokens})
	require.NoError(t, err)
	return srv.Handler()
}

func request(t *testing.T, h http.Handler, method, path, body, secret string) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

// Every refusal (no token, an unknown one, one without the scope) is
// answered before anything is done: nothing is written, nothing read.
func TestAuthRefusesWithoutWriting(t *testing.T) {
	f := setup(t, 0)
	tokens, err := intentapi.NewTokens("writer write "+writerSecret+"; reader read "+readerSecret+"\nboth write,read "+bothSecret, "test")
	require.NoError(t, err)
	h := authed(t, f, tokens)
	body := intentBody(t, "auth-1", "FollowArtist", "user-1", map[string]any{"artistId": "a"})

	code, msg, hdr := request(t, h, http.MethodPost, "/v1/intents", body, "")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, msg, "a bearer token is required")
	require.Equal(t, `Bearer realm="causet-runtime"`, hdr.Get("WWW-Authenticate"))
	code, _, _ = request(t, h, http.MethodPost, "/v1/intents", body, "not-a-token-0123456789abcdef0123456789")
	require.Equal(t, http.StatusUnauthorized, code)
	code, msg, _ = request(t, h, http.MethodPost, "/v1/intents", body, readerSecret)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, msg, "token reader may not write intents (its scopes: read)")
	require.Zero(t, f.count(t, "causet_intents"), "nothing written by a refused request")

	code, msg, _ = request(t, h, http.MethodPost, "/v1/intents", body, writerSecret)
	require.Equal(t, http.StatusOK, code, msg)
	code, msg, _ = request(t, h, http.MethodGet, "/v1/intents/auth-1", "", writerSecret)
	require.Equal(t, http.StatusForbidden, code, "reading needs scope read")
	require.Contains(t, msg, "may not read intents")
	code, msg, _ = request(t, h, http.MethodGet, "/v1/intents/auth-1", "", readerSecret)
	require.Equal(t, http.StatusOK, code, msg)
	require.Contains(t, msg, `"succeeded"`)
	code, _, _ = request(t, h, http.MethodGet, "/v1/intents/auth-1", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _, _ = request(t, h, http.MethodPost, "/v1/intents", intentBody(t, "auth-2", "FollowArtist", "user-2", map[string]any{"artistId": "a"}), bothSecret)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, f.count(t, "causet_intents"))
}

// A token file is read again when it changes: a new token works at once,
// a removed one no longer does, and a file that does not parse keeps the
// tokens in force.
func TestAuthTokenFileRotates(t *testing.T) {
	f := setup(t, 0)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# the writers\nold write "+writerSecret+"\n"), 0o600))
	tokens, err := intentapi.LoadTokensFile(file)
	require.NoError(t, err)
	h := authed(t, f, tokens)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tokens.WatchFile(ctx, 20*time.Millisecond, slog.New(slog.DiscardHandler))

	post := func(id, secret string) int {
		code, _, _ := request(t, h, http.MethodPost, "/v1/intents", intentBody(t, id, "FollowArtist", "user-1", map[string]any{"artistId": id}), secret)
		return code
	}
	require.Equal(t, http.StatusOK, post("rot-1", writerSecret))
	require.NoError(t, os.WriteFile(file, []byte("new write "+bothSecret+"\n"), 0o600))
	require.Eventually(t, func() bool { return post("rot-2", bothSecret) == http.StatusOK }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusUnauthorized, post("rot-3", writerSecret), "the old token is gone")
	require.NoError(t, os.WriteFile(file, []byte("broken\n"), 0o600))
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, http.StatusOK, post("rot-4", bothSecret), "a file that does not parse keeps the tokens in force")
}

func TestAuthFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	_, err := intentapi.AuthFromEnv(env(nil))
	require.ErrorContains(t, err, "CAUSET_RUNTIME_TOKENS_FILE (or CAUSET_RUNTIME_TOKENS) is required")
	tk, err := intentapi.AuthFromEnv(env(map[string]string{"CAUSET_RUNTIME_AUTH": "none"}))
	require.NoError(t, err)
	require.Nil(t, tk)
	tk, err = intentapi.AuthFromEnv(env(map[string]string{"CAUSET_RUNTIME_TOKENS": "a write,read " + bothSecret}))
	require.NoError(t, err)
	require.NotNil(t, tk)
	for kv, want := range map[string]string{
		"CAUSET_RUNTIME_AUTH=maybe":                                                 `CAUSET_RUNTIME_AUTH="maybe" is invalid`,
		"CAUSET_RUNTIME_TOKENS=a write short":                                       "token a is 5 characters, fewer than the 32 required",
		"CAUSET_RUNTIME_TOKENS=a admin " + bothSecret:                               `token a has scope "admin"`,
		"CAUSET_RUNTIME_TOKENS=a write":                                             "entry 1 has 2 fields",
		"CAUSET_RUNTIME_TOKENS=a read " + readerSecret + ";a write " + writerSecret: `token name "a" appears twice`,
		"CAUSET_RUNTIME_TOKENS_FILE=/no/such/file":                                  "CAUSET_RUNTIME_TOKENS_FILE=/no/such/file",
	} {
		k, v, _ := strings.Cut(kv, "=")
		_, err := intentapi.AuthFromEnv(env(map[string]string{k: v}))
		require.ErrorContains(t, err, want, kv)
	}
	_, err = intentapi.AuthFromEnv(env(map[string]string{"CAUSET_RUNTIME_AUTH": "none", "CAUSET_RUNTIME_TOKENS": "a write " + bothSecret}))
	require.ErrorContains(t, err, "choose one")
}
