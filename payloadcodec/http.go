package payloadcodec

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"
)

// DefaultMaxBodyBytes bounds one /encode or /decode request: the payloads of
// one history event are at most Temporal's 2 MiB blob limit, base64 in JSON.
const DefaultMaxBodyBytes = 8 << 20

// corsHeaders are the request headers the Temporal UI sends to a codec
// endpoint (Authorization and Authorization-Extras only when it passes the
// user's access token).
const corsHeaders = "Content-Type, X-Namespace, Authorization, Authorization-Extras"

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Origins are the web origins (scheme://host[:port]) whose pages may
	// call the endpoint: the Temporal UI's. Requests with another Origin
	// are refused; requests without one (the temporal CLI, an SDK's remote
	// codec, curl) are served.
	Origins []string
	// LoopbackHostOnly refuses requests whose Host is not a loopback name
	// or address: on a loopback listener this stops a web page from
	// reaching it through a DNS name rebound to 127.0.0.1.
	LoopbackHostOnly bool
	// MaxBodyBytes bounds a request body. Optional, defaults to
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives refused and failed requests. Optional, defaults to
	// none.
	Logger *slog.Logger
}

// NewHandler serves Temporal's remote codec protocol with codec: POST
// …/encode and …/decode with a Payloads JSON body ({"payloads":[…]}), any
// prefix (/default/decode works too), the CORS preflight of the UI, and GET
// /healthz.
func NewHandler(codec converter.PayloadCodec, o HandlerOptions) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &handler{codec: converter.NewPayloadCodecHTTPHandler(codec), o: o}
}

type handler struct {
	codec http.Handler
	o     HandlerOptions
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.o.LoopbackHostOnly && !loopbackHost(r.Host) {
		h.refuse(w, r, http.StatusForbidden, "host is not a loopback name or address")
		return
	}
	if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/encode") && !strings.HasSuffix(r.URL.Path, "/decode") {
		http.NotFound(w, r)
		return
	}
	origin := r.Header.Get("Origin")
	if origin != "" {
		if !slices.Contains(h.o.Origins, origin) {
			h.refuse(w, r, http.StatusForbidden, "origin is not allowed (CAUSET_CODEC_CORS_ORIGIN)")
			return
		}
		hd := w.Header()
		hd.Set("Access-Control-Allow-Origin", origin)
		hd.Set("Access-Control-Allow-Credentials", "true")
		hd.Add("Vary", "Origin")
	}
	switch r.Method {
	case http.MethodOptions:
		hd := w.Header()
		hd.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
		hd.Set("Access-Control-Allow-Headers", corsHeaders)
		hd.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPost:
		if r.ContentLength > h.o.MaxBodyBytes {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", h.o.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes)
		sw := &statusWriter{ResponseWriter: w}
		h.codec.ServeHTTP(sw, r)
		if sw.status >= 400 {
			// The SDK's handler answers the codec's error in the body; the
			// codec's errors hold no payload data and no key material.
			h.o.Logger.Warn("codec_request_failed", "event", "codec_request_failed", "path", r.URL.Path,
				"status", sw.status, "namespace", r.Header.Get("X-Namespace"))
		}
	default:
		w.Header().Set("Allow", "POST, OPTIONS")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	}
}

func (h *handler) refuse(w http.ResponseWriter, r *http.Request, status int, why string) {
	h.o.Logger.Warn("codec_request_refused", "event", "codec_request_refused", "path", r.URL.Path,
		"method", r.Method, "origin", r.Header.Get("Origin"), "host", r.Host, "status", status, "reason", why)
	http.Error(w, why, status)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackAddr reports whether a listen address (host:port) binds only
// loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return loopbackHost(host)
}

// ParseOrigins reads comma-separated web origins (scheme://host[:port],
// http or https, nothing after the host), as a browser sends them in Origin.
func ParseOrigins(v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "*" {
			return nil, fmt.Errorf("%q is not allowed: name the Temporal UI's origin, such as http://localhost:8233 (any origin would let every web page decrypt payloads)", s)
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%q is not an origin: want scheme://host[:port], such as http://localhost:8233", s)
		}
		host := strings.ToLower(u.Host)
		// Browsers leave the scheme's default port out of Origin.
		if u.Scheme == "http" {
			host = strings.TrimSuffix(host, ":80")
		} else {
			host = strings.TrimSuffix(host, ":443")
		}
		out = append(out, u.Scheme+"://"+host)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no origin given: want scheme://host[:port], such as http://localhost:8233")
	}
	return out, nil
}
