package intentapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/causet/projection-retry/config"
)

// Scope is what a bearer token may do.
type Scope string

const (
	// ScopeWrite submits intents (POST /v1/intents).
	ScopeWrite Scope = "write"
	// ScopeRead reads an intent's status and events (GET /v1/intents/{id}).
	ScopeRead Scope = "read"
)

// MinTokenBytes is the shortest secret a token may have: 32 characters,
// such as `openssl rand -base64 32` gives (44).
const MinTokenBytes = 32

// token is one configured bearer token: the SHA-256 of its secret, so that
// the secrets are not kept in memory as given.
type token struct {
	name   string
	scopes []Scope
	hash   [sha256.Size]byte
}

// Tokens are the bearer tokens the runtime accepts. A token file is read
// again when it changes (WatchFile), so tokens are rotated without a
// restart: add the new one, move the clients, remove the old one.
type Tokens struct {
	mu     sync.RWMutex
	tokens []token
	file   string
	mod    time.Time
	size   int64
}

// ParseTokens reads token lines: `<name> <scopes> <secret>`, scopes a comma-
// separated list of write and read, the secret at least MinTokenBytes of
// printable ASCII without spaces. Blank lines and lines starting with #
// are skipped; entries may also be separated by ';' (one environment
// variable). origin names where they come from, for errors.
func ParseTokens(text, origin string) ([]token, error) {
	var out []token
	names := map[string]bool{}
	for n, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ';' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: entry %d has %d fields: want `<name> <scopes> <secret>`", origin, n+1, len(f))
		}
		name, secret := f[0], f[2]
		if names[name] {
			return nil, fmt.Errorf("%s: token name %q appears twice", origin, name)
		}
		names[name] = true
		var scopes []Scope
		for _, s := range strings.Split(f[1], ",") {
			switch Scope(s) {
			case ScopeWrite, ScopeRead:
				scopes = append(scopes, Scope(s))
			default:
				return nil, fmt.Errorf("%s: token %s has scope %q: want write, read or write,read", origin, name, s)
			}
		}
		if len(secret) < MinTokenBytes {
			return nil, fmt.Errorf("%s: token %s is %d characters, fewer than the %d required", origin, name, len(secret), MinTokenBytes)
		}
		for i := 0; i < len(secret); i++ {
			if secret[i] <= ' ' || secret[i] > '~' {
				return nil, fmt.Errorf("%s: token %s has a character that is not printable ASCII", origin, name)
			}
		}
		out = append(out, token{name: name, scopes: scopes, hash: sha256.Sum256([]byte(secret))})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no token", origin)
	}
	return out, nil
}

// NewTokens returns the tokens of text (ParseTokens).
func NewTokens(text, origin string) (*Tokens, error) {
	ts, err := ParseTokens(text, origin)
	if err != nil {
		return nil, err
	}
	return &Tokens{tokens: ts}, nil
}

// LoadTokensFile reads the tokens of file; WatchFile keeps them current.
func LoadTokensFile(file string) (*Tokens, error) {
	t := &Tokens{file: file}
	if _, err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the file again when its size or modification time changed;
// it reports whether it did.
func (t *Tokens) reload() (bool, error) {
	st, err := os.Stat(t.file)
	if err != nil {
		return false, fmt.Errorf("CAUSET_RUNTIME_TOKENS_FILE=%s: %w", t.file, err)
	}
	t.mu.RLock()
	same := st.ModTime().Equal(t.mod) && st.Size() == t.size
	t.mu.RUnlock()
	if same {
		return false, nil
	}
	b, err := os.ReadFile(t.file)
	if err != nil {
		return false, fmt.Errorf("CAUSET_RUNTIME_TOKENS_FILE=%s: %w", t.file, err)
	}
	ts, err := ParseTokens(string(b), "CAUSET_RUNTIME_TOKENS_FILE="+t.file)
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	t.tokens, t.mod, t.size = ts, st.ModTime(), st.Size()
	t.mu.Unlock()
	return true, nil
}

// WatchFile reads the token file again every interval until ctx ends, when
// it has changed. A file that cannot be read or parsed keeps the tokens
// in force, and is logged.
func (t *Tokens) WatchFile(ctx context.Context, interval time.Duration, logger *slog.Logger) {
	if t.file == "" {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		changed, err := t.reload()
		switch {
		case err != nil:
			logger.Error("runtime tokens not reloaded: the tokens in force stay", "event", "runtime_tokens_reload_failed", "error", err.Error())
		case changed:
			t.mu.RLock()
			n := len(t.tokens)
			t.mu.RUnlock()
			logger.Info("runtime tokens reloaded", "event", "runtime_tokens_reloaded", "tokens", n)
		}
	}
}

// find returns the token whose secret is secret.
func (t *Tokens) find(secret string) (token, bool) {
	h := sha256.Sum256([]byte(secret))
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, tk := range t.tokens {
		if subtle.ConstantTimeCompare(h[:], tk.hash[:]) == 1 {
			return tk, true
		}
	}
	return token{}, false
}

// require answers 401 to a request without a known bearer token and 403 to
// one whose token lacks scope; it calls next otherwise. Neither answer
// writes anything.
func (s *Server) require(scope Scope, next http.HandlerFunc) http.HandlerFunc {
	if s.opts.Auth == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tk, known := s.opts.Auth.find(strings.TrimSpace(secret))
		switch {
		case !ok || !known:
			s.metrics.refused.WithLabelValues("unauthenticated").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="causet-runtime"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>); this one is missing or unknown")
		case !slices.Contains(tk.scopes, scope):
			s.metrics.refused.WithLabelValues("forbidden").Inc()
			writeError(w, http.StatusForbidden, fmt.Sprintf("token %s may not %s intents (its scopes: %s)", tk.name, scope, scopesString(tk.scopes)))
		default:
			next(w, r)
		}
	}
}

func scopesString(ss []Scope) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ",")
}

// AuthFromEnv reads the runtime's authentication: CAUSET_RUNTIME_AUTH
// (tokens, the default, or none), and the tokens from
// CAUSET_RUNTIME_TOKENS_FILE (re-read when it changes) or
// CAUSET_RUNTIME_TOKENS. Under tokens one of them is required: a runtime
// reachable without them would record intents for any entity of anyone.
// nil Tokens means no authentication.
func AuthFromEnv(lookup config.Lookup) (*Tokens, error) {
	mode, _ := lookup("CAUSET_RUNTIME_AUTH")
	file, hasFile := lookup("CAUSET_RUNTIME_TOKENS_FILE")
	text, hasText := lookup("CAUSET_RUNTIME_TOKENS")
	switch strings.TrimSpace(mode) {
	case "none":
		if hasFile || hasText {
			return nil, errors.New("CAUSET_RUNTIME_AUTH=none with CAUSET_RUNTIME_TOKENS_FILE or CAUSET_RUNTIME_TOKENS set: choose one")
		}
		return nil, nil
	case "", "tokens":
	default:
		return nil, fmt.Errorf("CAUSET_RUNTIME_AUTH=%q is invalid: want tokens (the default) or none", mode)
	}
	switch {
	case hasFile && hasText:
		return nil, errors.New("CAUSET_RUNTIME_TOKENS_FILE and CAUSET_RUNTIME_TOKENS are both set: use one")
	case hasFile:
		return LoadTokensFile(strings.TrimSpace(file))
	case hasText:
		return NewTokens(text, "CAUSET_RUNTIME_TOKENS")
	}
	return nil, errors.New("CAUSET_RUNTIME_TOKENS_FILE (or CAUSET_RUNTIME_TOKENS) is required: the runtime records intents for any " +
		"entity and shows any intent's events to whoever reaches it; set CAUSET_RUNTIME_AUTH=none to run it without " +
		"authentication, behind a gateway of your own")
}
