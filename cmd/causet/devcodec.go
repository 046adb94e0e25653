package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/payloadcodec"
)

// devCodec is the codec server `causet dev` runs when payload encryption
// is on (CAUSET_PAYLOAD_KEYS or _FILE) and it starts the Temporal dev server
// itself, so that the UI its banner links shows plaintext as `causet
// codec-server` makes a production UI do. The listener comes first, for the
// URL the dev server's --ui-codec-endpoint names; the handler once the UI's
// origin is known.
type devCodec struct {
	settings   codecServerSettings
	ln         net.Listener
	originsSet bool
}

// listenDevCodec listens for the dev codec server on CAUSET_CODEC_ADDR
// (default 127.0.0.1:8081, or a free loopback port when that is taken and
// the variable is not set). Nil without payload keys, or with
// TEMPORAL_ADDRESS set: that cluster's UI has its own codec settings.
func listenDevCodec(lookup config.Lookup) (*devCodec, error) {
	keys, err := config.LoadPayloadKeys(lookup)
	if err != nil || !keys.Enabled() {
		return nil, err
	}
	if v, _ := lookup("TEMPORAL_ADDRESS"); strings.TrimSpace(v) != "" {
		return nil, nil
	}
	s, err := loadCodecServerSettings(lookup)
	if err != nil {
		return nil, err
	}
	_, addrSet := lookup("CAUSET_CODEC_ADDR")
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil && !addrSet {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("codec server: listen on %s (CAUSET_CODEC_ADDR): %w", s.Addr, err)
	}
	s.Addr = ln.Addr().String()
	_, originsSet := lookup("CAUSET_CODEC_CORS_ORIGIN")
	return &devCodec{settings: s, ln: ln, originsSet: originsSet}, nil
}

// endpoint is the codec server's URL; empty when there is none.
func (d *devCodec) endpoint() string {
	if d == nil {
		return ""
	}
	return "http://" + d.ln.Addr().String()
}

// currentKey is the key ID new payloads are encrypted with.
func (d *devCodec) currentKey() string {
	if d == nil {
		return ""
	}
	return d.settings.Keys.Current
}

// close releases the listener of a codec server that never served.
func (d *devCodec) close() {
	if d != nil {
		_ = d.ln.Close()
	}
}

// serve answers the UI at uiURL (unless CAUSET_CODEC_CORS_ORIGIN says
// otherwise) until ctx is done.
func (d *devCodec) serve(ctx context.Context, uiURL string, logger *slog.Logger) error {
	if !d.originsSet && uiURL != "" {
		origins, err := payloadcodec.ParseOrigins(strings.Join(uiOrigins(uiURL), ","))
		if err != nil {
			d.close()
			return fmt.Errorf("codec server: the UI's origin %s: %w", uiURL, err)
		}
		d.settings.Origins = origins
	}
	srv, err := newCodecServer(d.settings, logger)
	if err != nil {
		d.close()
		return err
	}
	logger.Info("codec server listening", "addr", d.settings.Addr, "origins", d.settings.Origins,
		"currentKeyId", d.settings.Keys.Current, "keyIds", d.settings.Keys.IDs())
	return serveCodec(ctx, srv, d.ln)
}

// uiOrigins are the origins a browser sends for the UI at uiURL: as
// printed, and with localhost and 127.0.0.1 swapped.
func uiOrigins(uiURL string) []string {
	u, err := url.Parse(uiURL)
	if err != nil || u.Host == "" {
		return []string{uiURL}
	}
	origin := u.Scheme + "://" + u.Host
	out := []string{origin}
	switch host, port := u.Hostname(), u.Port(); host {
	case "127.0.0.1":
		out = append(out, u.Scheme+"://"+net.JoinHostPort("localhost", port))
	case "localhost":
		out = append(out, u.Scheme+"://"+net.JoinHostPort("127.0.0.1", port))
	}
	return out
}
