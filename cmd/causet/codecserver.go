package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/payloadcodec"
)

// Defaults of the codec server's variables.
const (
	defaultCodecAddr = "127.0.0.1:8081"
	// defaultCodecOrigins are the dev server's UI as `temporal server
	// start-dev` prints it and as `causet dev` does.
	defaultCodecOrigins = "http://localhost:8233,http://127.0.0.1:8233"
)

// codecServerCmd serves Temporal's remote codec endpoint with the workers'
// payload keys, for the Temporal UI and the temporal CLI.
type codecServerCmd struct{}

// codecServerSettings are the codec server's variables.
type codecServerSettings struct {
	Addr    string
	Origins []string
	Keys    config.PayloadKeys
}

func loadCodecServerSettings(lookup config.Lookup) (codecServerSettings, error) {
	s := codecServerSettings{Addr: defaultCodecAddr}
	if v, ok := lookup("CAUSET_CODEC_ADDR"); ok {
		v = strings.TrimSpace(v)
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			return s, fmt.Errorf("CAUSET_CODEC_ADDR=%q is invalid: want host:port, such as %s", v, defaultCodecAddr)
		}
		s.Addr = v
	}
	origins := defaultCodecOrigins
	if v, ok := lookup("CAUSET_CODEC_CORS_ORIGIN"); ok {
		origins = v
	}
	var err error
	if s.Origins, err = payloadcodec.ParseOrigins(origins); err != nil {
		return s, fmt.Errorf("CAUSET_CODEC_CORS_ORIGIN is invalid: %w", err)
	}
	if s.Keys, err = config.LoadPayloadKeys(lookup); err != nil {
		return s, err
	}
	if !s.Keys.Enabled() {
		return s, fmt.Errorf("%s (or %s) is not set: the codec server needs the keys the workers encrypt with", config.EnvPayloadKeys, config.EnvPayloadKeysFile)
	}
	return s, nil
}

// Run serves until ctx is done.
func (codecServerCmd) Run(ctx context.Context, logger *slog.Logger) error {
	s, err := loadCodecServerSettings(os.LookupEnv)
	if err != nil {
		return err
	}
	srv, err := newCodecServer(s, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("codec server: listen on %s (CAUSET_CODEC_ADDR): %w", s.Addr, err)
	}
	logger.Info("codec server listening", "addr", ln.Addr().String(), "origins", s.Origins,
		"currentKeyId", s.Keys.Current, "keyIds", s.Keys.IDs(), "loopbackHostOnly", payloadcodec.IsLoopbackAddr(s.Addr))
	return serveCodec(ctx, srv, ln)
}

// newCodecServer builds the HTTP server of s; on a loopback address it only
// answers loopback Host names.
func newCodecServer(s codecServerSettings, logger *slog.Logger) (*http.Server, error) {
	codec, err := payloadcodec.New(s.Keys)
	if err != nil {
		return nil, err
	}
	h := payloadcodec.NewHandler(codec, payloadcodec.HandlerOptions{
		Origins:          s.Origins,
		LoopbackHostOnly: payloadcodec.IsLoopbackAddr(s.Addr),
		Logger:           logger,
	})
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
	}, nil
}

// serveCodec serves on ln until ctx is done, then drains for up to 5 s.
func serveCodec(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
