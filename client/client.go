package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/backoff"
)

// Defaults of the options.
const (
	DefaultMaxTries          = 5
	DefaultInitialBackoff    = 100 * time.Millisecond
	DefaultBackoffMultiplier = 2.0
	DefaultMaxBackoff        = 5 * time.Second
	DefaultRequestTimeout    = 10 * time.Second
)

// Result.Status values, as the runtime's 200 answer spells them.
const (
	ResultSuccess  = "SUCCESS"
	ResultRejected = "REJECTED"
)

// IntentStatus.Status values, as GET /v1/intents/{intentId} spells them.
const (
	StateUnknown   = "unknown"
	StateSucceeded = "succeeded"
	StateRejected  = "rejected"
)

// maxResponseBytes bounds an answer held in memory: a SUCCESS carries every
// event of the intent, each payload at most 256 KiB.
const maxResponseBytes = 64 << 20

// Intent is one intent to submit. IntentID is required: it is what makes a
// re-submission safe (see NewIntentID). Payload must marshal to a JSON object.
type Intent struct {
	IntentID   string
	IntentType string
	EntityID   string
	ForkID     string
	Payload    any
}

// Result is the runtime's answer to a recorded intent: Status is
// ResultSuccess (with the events written) or ResultRejected (with the
// preflight rule and its reason).
type Result struct {
	Status string
	Events []event.Envelope
	Rule   string
	Reason string
}

// IntentStatus is the answer of GET /v1/intents/{intentId}: Status is
// StateUnknown (nothing recorded), StateSucceeded (with the events) or
// StateRejected (with the rule and reason).
type IntentStatus struct {
	IntentID string
	Status   string
	Events   []event.Envelope
	Rule     string
	Reason   string
}

// HTTPError is an error status from the runtime.
type HTTPError struct {
	Method     string
	Path       string
	StatusCode int
	Message    string // the runtime's "error" field, or the start of the body
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ErrGaveUp matches a *GaveUpError.
var ErrGaveUp = errors.New("gave up")

// ErrOutcomeUnknown says a submission got no answer and its outcome could not
// be learned: the intent may or may not be recorded.
var ErrOutcomeUnknown = errors.New("intent outcome unknown (it may be recorded; re-submitting the same intentId is safe)")

// GaveUpError says all tries were spent; Err is the last failure.
type GaveUpError struct {
	Tries int
	Err   error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("gave up after %d tries: %v", e.Tries, e.Err)
}

func (e *GaveUpError) Unwrap() error        { return e.Err }
func (e *GaveUpError) Is(target error) bool { return target == ErrGaveUp }

// Client submits intents to one runtime. It is safe for concurrent use.
type Client struct {
	base           string
	http           *http.Client
	transport      http.RoundTripper
	maxTries       int
	initial        time.Duration
	multiplier     float64
	maxBackoff     time.Duration
	requestTimeout time.Duration
	token          string // the bearer token, when the runtime requires one
	err            error  // a bad base URL or option, returned by every call

	// Seams for tests: the wait between tries and its jitter.
	sleep  func(context.Context, time.Duration) error
	jitter func(time.Duration) time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests with hc (default: a client of its own on
// http.DefaultTransport). Its Timeout, if any, applies as well as the
// request timeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc == nil {
			c.fail(errors.New("WithHTTPClient: nil *http.Client"))
			return
		}
		c.http = hc
	}
}

// WithTransport sends requests through rt, on a copy of the HTTP client.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) {
		if rt == nil {
			c.fail(errors.New("WithTransport: nil http.RoundTripper"))
			return
		}
		c.transport = rt
	}
}

// WithMaxTries sets how many submissions Submit makes, the first included,
// and how many requests one status check makes (default 5, at least 1).
func WithMaxTries(n int) Option {
	return func(c *Client) {
		if n < 1 {
			c.fail(fmt.Errorf("WithMaxTries(%d): want at least 1", n))
			return
		}
		c.maxTries = n
	}
}

// WithBackoff sets the ceiling of the wait before retry n to
// min(max, initial × multiplier^(n−1)) (defaults 100 ms, 2, 5 s); the wait is
// drawn uniformly below it. initial ≥ 0, multiplier ≥ 1, max ≥ initial.
func WithBackoff(initial time.Duration, multiplier float64, max time.Duration) Option {
	return func(c *Client) {
		if initial < 0 || !(multiplier >= 1) || math.IsInf(multiplier, 0) || max < initial {
			c.fail(fmt.Errorf("WithBackoff(%v, %v, %v): want initial ≥ 0, a finite multiplier ≥ 1 and max ≥ initial", initial, multiplier, max))
			return
		}
		c.initial, c.multiplier, c.maxBackoff = initial, multiplier, max
	}
}

// WithRequestTimeout bounds each HTTP request, POST or GET (default 10 s; 0:
// no bound but the context's). A request that runs past it is a lost answer.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d < 0 {
			c.fail(fmt.Errorf("WithRequestTimeout(%v): want 0 or more", d))
			return
		}
		c.requestTimeout = d
	}
}

// WithToken sends token as the bearer token of every request (the runtime's
// CAUSET_RUNTIME_TOKENS: scope write to submit, read for status). A 401 or
// 403 is final: the client never re-submits it.
func WithToken(token string) Option {
	return func(c *Client) { c.token = token }
}

// New returns a client of the runtime at baseURL (http://host:port or
// https://host:port, optionally with a path prefix). A bad baseURL or option
// is reported by every call of the client.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		http:           &http.Client{},
		maxTries:       DefaultMaxTries,
		initial:        DefaultInitialBackoff,
		multiplier:     DefaultBackoffMultiplier,
		maxBackoff:     DefaultMaxBackoff,
		requestTimeout: DefaultRequestTimeout,
		sleep:          backoff.Sleep,
		jitter:         fullJitter,
	}
	for _, o := range opts {
		o(c)
	}
	if c.transport != nil {
		hc := *c.http
		hc.Transport = c.transport
		c.http = &hc
	}
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		c.fail(fmt.Errorf("base URL: %w", err))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.fail(fmt.Errorf("base URL %q: want http://host:port or https://host:port", baseURL))
	}
	c.base = strings.TrimRight(baseURL, "/")
	return c
}

func (c *Client) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("client: %w", err)
	}
}

// NewIntentID returns a random intent ID (26 characters of base32, 130 bits).
func NewIntentID() string { return rand.Text() }

// Submit submits in and returns its outcome, retrying as the package
// documentation's table says.
func (c *Client) Submit(ctx context.Context, in Intent) (Result, error) {
	if c.err != nil {
		return Result{}, c.err
	}
	body, err := encodeIntent(in)
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = c.retry(ctx, func() (bool, error) {
		r, k, err := c.post(ctx, body)
		switch k {
		case answered:
			res = r
			return true, nil
		case final:
			return true, err
		case retryable:
			return false, err
		}
		if ctx.Err() != nil {
			return true, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		st, serr := c.status(ctx, in.IntentID)
		if serr != nil {
			return true, fmt.Errorf("%w: %w; then the status check failed: %w", ErrOutcomeUnknown, err, serr)
		}
		switch st.Status {
		case StateSucceeded:
			res = Result{Status: ResultSuccess, Events: st.Events}
			return true, nil
		case StateRejected:
			res = Result{Status: ResultRejected, Rule: st.Rule, Reason: st.Reason}
			return true, nil
		}
		return false, fmt.Errorf("%w; the status check says it is not recorded", err)
	})
	return res, err
}

// Status asks the runtime whether intentID is recorded, retrying a failed
// request (5xx, 429, no answer) with the backoff up to MaxTries times.
func (c *Client) Status(ctx context.Context, intentID string) (IntentStatus, error) {
	if c.err != nil {
		return IntentStatus{}, c.err
	}
	if intentID == "" {
		return IntentStatus{}, errors.New("client: intentID is required")
	}
	return c.status(ctx, intentID)
}

func (c *Client) status(ctx context.Context, intentID string) (IntentStatus, error) {
	var st IntentStatus
	err := c.retry(ctx, func() (bool, error) {
		s, k, err := c.get(ctx, intentID)
		switch k {
		case answered:
			st = s
			return true, nil
		case final:
			return true, err
		}
		return false, err
	})
	return st, err
}

// retry calls try until it reports done, MaxTries calls were made or ctx
// ends during a wait.
func (c *Client) retry(ctx context.Context, try func() (done bool, err error)) error {
	for n := 1; ; n++ {
		done, err := try()
		if done {
			return err
		}
		if n >= c.maxTries {
			return &GaveUpError{Tries: n, Err: err}
		}
		if werr := c.sleep(ctx, c.jitter(c.ceiling(n))); werr != nil {
			return fmt.Errorf("%w while waiting to retry, after %d tries; the last: %w", werr, n, err)
		}
	}
}

// ceiling is the longest wait before retry n (n ≥ 1).
func (c *Client) ceiling(n int) time.Duration {
	d := float64(c.initial) * math.Pow(c.multiplier, float64(n-1))
	if d >= float64(c.maxBackoff) {
		return c.maxBackoff
	}
	return time.Duration(d)
}

func fullJitter(ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return mrand.N(ceiling + 1)
}

// kind classifies the result of one request.
type kind int

const (
	answered  kind = iota // a 200 with an outcome
	final                 // an answer that asking again cannot change
	retryable             // nothing was written: ask again
	lost                  // no answer: the outcome is unknown
)

type wireIntent struct {
	IntentID   string          `json:"intentId"`
	IntentType string          `json:"intentType"`
	EntityID   string          `json:"entityId"`
	ForkID     string          `json:"forkId"`
	Payload    json.RawMessage `json:"payload"`
}

type wireAnswer struct {
	IntentID string           `json:"intentId"`
	Status   string           `json:"status"`
	Events   []event.Envelope `json:"events"`
	Rule     string           `json:"rule"`
	Reason   string           `json:"reason"`
}

func encodeIntent(in Intent) ([]byte, error) {
	if in.IntentID == "" {
		return nil, errors.New("client: intentId is required (see NewIntentID)")
	}
	p, err := json.Marshal(in.Payload)
	if err != nil {
		return nil, fmt.Errorf("client: intent %s: payload: %w", in.IntentID, err)
	}
	if len(p) == 0 || p[0] != '{' {
		return nil, fmt.Errorf("client: intent %s: payload must be a JSON object, got %.20s", in.IntentID, p)
	}
	return json.Marshal(wireIntent{in.IntentID, in.IntentType, in.EntityID, in.ForkID, p})
}

const intentsPath = "/v1/intents"

func (c *Client) post(ctx context.Context, body []byte) (Result, kind, error) {
	code, b, err := c.do(ctx, http.MethodPost, intentsPath, body)
	if err != nil {
		if notSent(err) {
			return Result{}, retryable, err
		}
		return Result{}, lost, err
	}
	if code == http.StatusGatewayTimeout {
		// The runtime sent COMMIT and lost its answer: the outcome is
		// unknown, as with no answer at all.
		return Result{}, lost, httpError(http.MethodPost, intentsPath, code, b)
	}
	if code/100 != 2 {
		return Result{}, classify(code), httpError(http.MethodPost, intentsPath, code, b)
	}
	var a wireAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		// The answer is a 200, so the intent is recorded: the status check
		// reads its outcome.
		return Result{}, lost, fmt.Errorf("POST %s: unreadable %d answer: %w", intentsPath, code, err)
	}
	switch a.Status {
	case ResultSuccess:
		return Result{Status: a.Status, Events: a.Events}, answered, nil
	case ResultRejected:
		return Result{Status: a.Status, Rule: a.Rule, Reason: a.Reason}, answered, nil
	}
	return Result{}, final, fmt.Errorf("POST %s: %d answer with status %q, want %s or %s", intentsPath, code, a.Status, ResultSuccess, ResultRejected)
}

func (c *Client) get(ctx context.Context, intentID string) (IntentStatus, kind, error) {
	path := intentsPath + "/" + url.PathEscape(intentID)
	code, b, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return IntentStatus{}, retryable, err // a read is always safe to repeat
	}
	if code/100 != 2 {
		return IntentStatus{}, classify(code), httpError(http.MethodGet, path, code, b)
	}
	var a wireAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return IntentStatus{}, retryable, fmt.Errorf("GET %s: unreadable %d answer: %w", path, code, err)
	}
	switch a.Status {
	case StateUnknown, StateSucceeded, StateRejected:
		return IntentStatus(a), answered, nil
	}
	return IntentStatus{}, final, fmt.Errorf("GET %s: %d answer with status %q, want %s, %s or %s", path, code, a.Status, StateUnknown, StateSucceeded, StateRejected)
}

// classify sorts an error status: 5xx (but 504, which POST reads as an
// unknown outcome), 429 and 409 (the same intentId in progress) mean
// nothing was written by this request: ask again.
func classify(code int) kind {
	if code >= 500 || code == http.StatusTooManyRequests || code == http.StatusConflict {
		return retryable
	}
	return final
}

// do makes one request and reads the whole answer. An error means no
// complete answer arrived.
func (c *Client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	rctx := ctx
	if c.requestTimeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.requestTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err == nil {
		defer resp.Body.Close()
		var b []byte
		b, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
		if err == nil && len(b) > maxResponseBytes {
			err = fmt.Errorf("answer longer than %d bytes", maxResponseBytes)
		}
		if err == nil {
			return resp.StatusCode, b, nil
		}
		err = fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err)
	}
	if ctx.Err() == nil && rctx.Err() != nil {
		return 0, nil, fmt.Errorf("%s %s: no answer within the request timeout (%v): %w", method, path, c.requestTimeout, err)
	}
	return 0, nil, fmt.Errorf("%s %s: no answer: %w", method, path, err)
}

// notSent reports whether err happened before the request left: no
// connection could be made, so the runtime saw nothing.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func httpError(method, path string, code int, body []byte) *HTTPError {
	var e struct {
		Error string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	} else {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 300 {
			msg = strings.ToValidUTF8(msg[:300], "") + "…"
		}
	}
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "�")
	}
	return &HTTPError{Method: method, Path: path, StatusCode: code, Message: msg}
}
