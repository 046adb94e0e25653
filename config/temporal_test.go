package config

// The TEMPORAL_* variables are not parsed by this package: the worker and the
// bridge load them with go.temporal.io/sdk/contrib/envconfig, Temporal's own
// convention (CONTRACT §3). These tests pin down what that loader does with the
// variables we document, and dial a local TLS gRPC server that speaks enough
// of the WorkflowService for client.Dial to prove TLS, mTLS and the API key
// work end to end.

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/causet/projection-retry/internal/testenv"
)

// temporalEnv implements envconfig.EnvLookup over key/value pairs. It points
// TEMPORAL_CONFIG_FILE at a file that does not exist so a developer's
// ~/.config/temporalio/temporal.toml cannot leak into the test.
type temporalEnv map[string]string

func newTemporalEnv(t *testing.T, kv ...string) temporalEnv {
	e := temporalEnv{"TEMPORAL_CONFIG_FILE": filepath.Join(t.TempDir(), "absent.toml")}
	for i := 0; i < len(kv); i += 2 {
		e[kv[i]] = kv[i+1]
	}
	return e
}

func (e temporalEnv) LookupEnv(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e temporalEnv) Environ() []string {
	out := make([]string, 0, len(e))
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func loadTemporal(t *testing.T, kv ...string) (client.Options, error) {
	t.Helper()
	return envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{EnvLookup: newTemporalEnv(t, kv...)})
}

func TestTemporalEnvconfigOptions(t *testing.T) {
	pki := testenv.NewPKI(t, "temporal CA")
	const apiKey = "S3cr3tTemporalKey"

	t.Run("nothing set", func(t *testing.T) {
		o, err := loadTemporal(t)
		require.NoError(t, err)
		// Empty: cmd/causet fills in 127.0.0.1:7233 and "default" (CONTRACT §3).
		require.Empty(t, o.HostPort)
		require.Empty(t, o.Namespace)
		require.Nil(t, o.Credentials)
		require.Nil(t, o.ConnectionOptions.TLS)
	})
	t.Run("address and namespace", func(t *testing.T) {
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", "temporal.internal:7233", "TEMPORAL_NAMESPACE", "causet-prod")
		require.NoError(t, err)
		require.Equal(t, "temporal.internal:7233", o.HostPort)
		require.Equal(t, "causet-prod", o.Namespace)
		require.Nil(t, o.Credentials)
		require.Nil(t, o.ConnectionOptions.TLS, "plaintext unless TLS or an API key is configured")
	})
	t.Run("API key turns TLS on with system roots", func(t *testing.T) {
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", "ns.acct.tmprl.cloud:7233", "TEMPORAL_API_KEY", apiKey)
		require.NoError(t, err)
		require.NotNil(t, o.Credentials)
		require.NotNil(t, o.ConnectionOptions.TLS)
		require.Nil(t, o.ConnectionOptions.TLS.RootCAs, "system roots")
		require.Empty(t, o.ConnectionOptions.TLS.Certificates)
	})
	t.Run("API key with TEMPORAL_TLS=false stays plaintext", func(t *testing.T) {
		o, err := loadTemporal(t, "TEMPORAL_API_KEY", apiKey, "TEMPORAL_TLS", "false")
		require.NoError(t, err)
		require.NotNil(t, o.Credentials)
		require.True(t, o.ConnectionOptions.TLSDisabled)
		require.Nil(t, o.ConnectionOptions.TLS)
	})
	t.Run("TEMPORAL_TLS=true alone: TLS with system roots", func(t *testing.T) {
		o, err := loadTemporal(t, "TEMPORAL_TLS", "true")
		require.NoError(t, err)
		require.NotNil(t, o.ConnectionOptions.TLS)
		require.Nil(t, o.ConnectionOptions.TLS.RootCAs)
	})
	t.Run("mTLS from files with CA and server name", func(t *testing.T) {
		o, err := loadTemporal(t,
			"TEMPORAL_ADDRESS", "127.0.0.1:7233",
			"TEMPORAL_NAMESPACE", "causet",
			"TEMPORAL_TLS_CLIENT_CERT_PATH", pki.ClientCert,
			"TEMPORAL_TLS_CLIENT_KEY_PATH", pki.ClientKey,
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH", pki.CAFile,
			"TEMPORAL_TLS_SERVER_NAME", "broker.test",
		)
		require.NoError(t, err)
		tc := o.ConnectionOptions.TLS
		require.NotNil(t, tc)
		require.Len(t, tc.Certificates, 1)
		require.NotNil(t, tc.RootCAs)
		require.True(t, tc.RootCAs.Equal(pki.CAPool), "RootCAs is exactly the CA file")
		require.Equal(t, "broker.test", tc.ServerName)
		require.False(t, tc.InsecureSkipVerify)
	})
	t.Run("inline PEM data", func(t *testing.T) {
		cert, err := os.ReadFile(pki.ClientCert)
		require.NoError(t, err)
		key, err := os.ReadFile(pki.ClientKey)
		require.NoError(t, err)
		ca, err := os.ReadFile(pki.CAFile)
		require.NoError(t, err)
		o, err := loadTemporal(t,
			"TEMPORAL_TLS_CLIENT_CERT_DATA", string(cert),
			"TEMPORAL_TLS_CLIENT_KEY_DATA", string(key),
			"TEMPORAL_TLS_SERVER_CA_CERT_DATA", string(ca),
		)
		require.NoError(t, err)
		require.Len(t, o.ConnectionOptions.TLS.Certificates, 1)
		require.True(t, o.ConnectionOptions.TLS.RootCAs.Equal(pki.CAPool))
	})
	t.Run("disable host verification", func(t *testing.T) {
		o, err := loadTemporal(t, "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "true")
		require.NoError(t, err)
		require.True(t, o.ConnectionOptions.TLS.InsecureSkipVerify)
	})

	// Misconfigurations fail at load with the path, and never with the key.
	bad := []struct {
		name   string
		env    []string
		errHas string
	}{
		{"cert without key", []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", pki.ClientCert, "TEMPORAL_API_KEY", apiKey}, "if either client cert or key path is present, other must be present too"},
		{"missing CA file", []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "/nonexistent/ca.pem", "TEMPORAL_API_KEY", apiKey}, "/nonexistent/ca.pem"},
		{"missing client cert", []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", "/nonexistent/c.pem", "TEMPORAL_TLS_CLIENT_KEY_PATH", pki.ClientKey, "TEMPORAL_API_KEY", apiKey}, "/nonexistent/c.pem"},
		{"CA file without a certificate", []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", pki.ClientKey, "TEMPORAL_API_KEY", apiKey}, "failed adding server CA to CA pool"},
	}
	for _, b := range bad {
		t.Run("bad/"+b.name, func(t *testing.T) {
			_, err := loadTemporal(t, b.env...)
			require.Error(t, err)
			require.Contains(t, err.Error(), b.errHas)
			require.NotContains(t, err.Error(), apiKey)
		})
	}
}

// fakeFrontend is a TLS gRPC server that answers GetSystemInfo and the health
// check like a Temporal frontend, recording what each call carried.
type fakeFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer

	mu     sync.Mutex
	auth   []string // authorization metadata seen
	peerCN []string // verified client certificate subjects seen
}

func (f *fakeFrontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{
		ServerVersion: "fake",
		Capabilities:  &workflowservice.GetSystemInfoResponse_Capabilities{},
	}, nil
}

func (f *fakeFrontend) record(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		f.auth = append(f.auth, md.Get("authorization")...)
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			for _, c := range ti.State.VerifiedChains {
				f.peerCN = append(f.peerCN, c[0].Subject.CommonName)
			}
		}
	}
}

func (f *fakeFrontend) seen() (auth, cn []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...), append([]string(nil), f.peerCN...)
}

func startFakeFrontend(t *testing.T, tc *tls.Config) (string, *fakeFrontend) {
	t.Helper()
	f := &fakeFrontend{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tc)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			f.record(ctx)
			return h(ctx, req)
		}),
	)
	workflowservice.RegisterWorkflowServiceServer(srv, f)
	hs := health.NewServer()
	hs.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), f
}

func dialTemporal(t *testing.T, o client.Options) (client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, o)
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

func TestTemporalTLSDial(t *testing.T) {
	pki := testenv.NewPKI(t, "temporal CA")
	const apiKey = "S3cr3tTemporalKey"

	t.Run("mTLS with API key", func(t *testing.T) {
		addr, f := startFakeFrontend(t, pki.ServerTLS(true))
		o, err := loadTemporal(t,
			"TEMPORAL_ADDRESS", addr,
			"TEMPORAL_NAMESPACE", "causet",
			"TEMPORAL_API_KEY", apiKey,
			"TEMPORAL_TLS_CLIENT_CERT_PATH", pki.ClientCert,
			"TEMPORAL_TLS_CLIENT_KEY_PATH", pki.ClientKey,
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH", pki.CAFile,
			"TEMPORAL_TLS_SERVER_NAME", "broker.test",
		)
		require.NoError(t, err)
		c, err := dialTemporal(t, o)
		require.NoError(t, err)
		_, err = c.CheckHealth(context.Background(), &client.CheckHealthRequest{})
		require.NoError(t, err)
		auth, cn := f.seen()
		require.Contains(t, auth, "Bearer "+apiKey, "the API key is sent as a bearer token")
		require.Contains(t, cn, "client", "the server verified our client certificate")
	})
	t.Run("server TLS with CA file, no client cert", func(t *testing.T) {
		addr, f := startFakeFrontend(t, pki.ServerTLS(false))
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", addr, "TEMPORAL_TLS_SERVER_CA_CERT_PATH", pki.CAFile)
		require.NoError(t, err)
		_, err = dialTemporal(t, o)
		require.NoError(t, err)
		auth, cn := f.seen()
		require.Empty(t, auth)
		require.Empty(t, cn)
	})
	t.Run("wrong CA fails", func(t *testing.T) {
		addr, _ := startFakeFrontend(t, pki.ServerTLS(false))
		other := testenv.NewPKI(t, "other CA")
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", addr, "TEMPORAL_API_KEY", apiKey, "TEMPORAL_TLS_SERVER_CA_CERT_PATH", other.CAFile)
		require.NoError(t, err)
		_, err = dialTemporal(t, o)
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate signed by unknown authority")
		require.NotContains(t, err.Error(), apiKey)
	})
	t.Run("API key alone uses system roots and rejects a private CA", func(t *testing.T) {
		addr, f := startFakeFrontend(t, pki.ServerTLS(false))
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", addr, "TEMPORAL_API_KEY", apiKey)
		require.NoError(t, err)
		_, err = dialTemporal(t, o)
		require.Error(t, err)
		require.NotContains(t, err.Error(), apiKey)
		auth, _ := f.seen()
		require.Empty(t, auth, "the key is never sent over an unverified connection")
	})
	t.Run("mTLS server rejects a client without certificate", func(t *testing.T) {
		addr, f := startFakeFrontend(t, pki.ServerTLS(true))
		o, err := loadTemporal(t, "TEMPORAL_ADDRESS", addr, "TEMPORAL_TLS_SERVER_CA_CERT_PATH", pki.CAFile)
		require.NoError(t, err)
		_, err = dialTemporal(t, o)
		// With TLS 1.3 the server's rejection arrives after the client's
		// handshake completes, so the error is "certificate required" or a
		// broken pipe depending on timing; either way no call got through.
		require.Error(t, err)
		auth, cn := f.seen()
		require.Empty(t, auth)
		require.Empty(t, cn)
	})
}
