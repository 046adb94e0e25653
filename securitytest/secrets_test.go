package securitytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/event"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/projection"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The secrets planted in the environment; none may appear in any output.
const (
	dbPassword    = "S3cr3tPw"
	temporalKey   = "S3cr3tKey"
	kafkaPassword = "S3cr3tKafka"
)

var secrets = []string{dbPassword, temporalKey, kafkaPassword}

// buildCauset builds ./cmd/causet into a temp dir.
func buildCauset(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "causet")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/causet")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/causet:\n%s", out)
	return bin
}

// childEnv is the test process's environment without anything that would
// point causet at real services, plus kv.
func childEnv(t *testing.T, kv ...string) []string {
	t.Helper()
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		if strings.HasPrefix(k, "TEMPORAL_") || strings.HasPrefix(k, "KAFKA_") || strings.HasPrefix(k, "CAUSET_") ||
			strings.HasPrefix(k, "PROJECTION_WORKER_") || k == "DATABASE_URL" || strings.HasPrefix(k, "PG") {
			continue
		}
		env = append(env, e)
	}
	env = append(env,
		// Keep a developer's ~/.config/temporalio/temporal.toml out of it.
		"TEMPORAL_CONFIG_FILE="+filepath.Join(t.TempDir(), "absent.toml"),
		"CAUSET_METRICS_ADDR=127.0.0.1:0",
	)
	for i := 0; i < len(kv); i += 2 {
		env = append(env, kv[i]+"="+kv[i+1])
	}
	return env
}

type runResult struct {
	output   string // stdout and stderr, interleaved
	err      error  // exit error; nil on exit 0
	timedOut bool
	took     time.Duration
}

// runCauset runs the binary; after timeout it is interrupted (SIGINT), then
// killed 10 s later.
func runCauset(t *testing.T, bin string, env []string, timeout time.Duration, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	return runResult{output: out.String(), err: err, timedOut: ctx.Err() != nil, took: time.Since(start)}
}

func requireNoSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range secrets {
		require.NotContains(t, s, secret, "%s leaks a secret", what)
		require.NotContains(t, s, url.QueryEscape(secret), "%s leaks a secret (URL-encoded)", what)
	}
}

// unreachableEnv names a secret for every service, each at an address where
// nothing listens. The Kafka SASL settings are complete so that a binary that
// reads them (config.LoadKafkaSecurity) gets as far as dialing.
func unreachableEnv(t *testing.T, dbURL string) []string {
	return childEnv(t,
		"DATABASE_URL", dbURL,
		"TEMPORAL_ADDRESS", "127.0.0.1:1",
		"TEMPORAL_NAMESPACE", "default",
		"TEMPORAL_API_KEY", temporalKey,
		"KAFKA_BROKERS", "127.0.0.1:1",
		"KAFKA_SASL_MECHANISM", "PLAIN",
		"KAFKA_SASL_USERNAME", "causet",
		"KAFKA_SASL_PASSWORD", kafkaPassword,
	)
}

// TestSecretsNotInOutputWhenServicesUnreachable runs causet commands whose
// services cannot be reached: they must fail, and say why without the
// secrets.
func TestSecretsNotInOutputWhenServicesUnreachable(t *testing.T) {
	bin := buildCauset(t)
	env := unreachableEnv(t, "postgres://user:"+dbPassword+"@127.0.0.1:1/db?connect_timeout=3")
	example, err := exampleprojections.Document("artist_followers")
	require.NoError(t, err)
	docFile := filepath.Join(t.TempDir(), "artist_followers.yaml")
	require.NoError(t, os.WriteFile(docFile, example, 0o600))

	for _, args := range [][]string{
		{"worker"},
		{"projections", "list"},
		{"projections", "deploy", docFile},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], "_"), func(t *testing.T) {
			r := runCauset(t, bin, env, 60*time.Second, args...)
			t.Logf("causet %s: exit=%v after %s, output:\n%s", strings.Join(args, " "), r.err, r.took.Round(time.Millisecond), r.output)
			require.False(t, r.timedOut, "causet %v did not fail on its own within 60s", args)
			require.Error(t, r.err, "causet %v must fail when PostgreSQL is unreachable", args)
			require.NotEmpty(t, strings.TrimSpace(r.output), "the failure is explained")
			requireNoSecrets(t, "causet "+strings.Join(args, " "), r.output)
		})
	}
}

// TestSecretsNotInOutputWhenTemporalUnreachable gives the worker a working
// database (with a password in its URL, which trust authentication ignores)
// so it gets as far as dialing Temporal with the API key.
func TestSecretsNotInOutputWhenTemporalUnreachable(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	if u.User != nil {
		if _, has := u.User.Password(); !has {
			u.User = url.UserPassword(u.User.Username(), dbPassword)
		}
	}
	withPw := u.String()
	// Only use the URL with the planted password if the server accepts it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if pool, err := pgxpool.New(ctx, withPw); err == nil {
		if pool.Ping(ctx) != nil {
			withPw = dbURL
		}
		pool.Close()
	}
	t.Logf("DATABASE_URL carries the planted password: %t", withPw != dbURL)
	bin := buildCauset(t)
	r := runCauset(t, bin, unreachableEnv(t, withPw), 90*time.Second, "worker")
	t.Logf("causet worker: exit=%v after %s, output:\n%s", r.err, r.took.Round(time.Millisecond), r.output)
	require.False(t, r.timedOut, "causet worker did not fail on its own within 90s")
	require.Error(t, r.err)
	require.Contains(t, r.output, "127.0.0.1:1", "the error names the Temporal address")
	requireNoSecrets(t, "causet worker", r.output)
}

// TestSecretsNotInPostgresErrors: the connection errors that end up in logs,
// workflow histories and DLQ records (errorKind connection) never carry the
// DATABASE_URL password.
func TestSecretsNotInPostgresErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, dbURL := range []string{
		"postgres://user:" + dbPassword + "@127.0.0.1:1/db?connect_timeout=2",
		"host=127.0.0.1 port=1 user=user password=" + dbPassword + " dbname=db connect_timeout=2",
	} {
		pool, err := pgxpool.New(ctx, dbURL)
		require.NoError(t, err, "pgxpool.New is lazy")
		_, err = projection.NewEngine(ctx, pool, nil)
		pool.Close()
		require.Error(t, err)
		t.Logf("engine error: %v", err)
		requireNoSecrets(t, "projection.NewEngine error", err.Error())
		var ae *projection.ApplyError
		if errors.As(err, &ae) {
			b, _ := json.Marshal(ae)
			requireNoSecrets(t, "ApplyError JSON", string(b))
		}
	}
}

const injection = `'); DROP TABLE artist_followers; --`

func deployFollowers(t *testing.T) (*pgxpool.Pool, *projection.Engine) {
	t.Helper()
	pool := testenv.Postgres(t)
	ctx := context.Background()
	ddl, err := exampleprojections.DDL("artist_followers")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ddl)
	require.NoError(t, err)
	engine, err := projection.NewEngine(ctx, pool, nil)
	require.NoError(t, err)
	t.Cleanup(engine.Close)
	b, err := exampleprojections.Document("artist_followers")
	require.NoError(t, err)
	doc, err := projection.Parse(b)
	require.NoError(t, err)
	_, err = engine.Deploy(ctx, doc)
	require.NoError(t, err)
	return pool, engine
}

func followed(eventID, user, artist string) event.Envelope {
	payload, _ := json.Marshal(map[string]string{"artistId": artist})
	return event.Envelope{
		EventID: eventID, EventType: "ARTIST_FOLLOWED", EntityID: user, ForkID: "production",
		OccurredAt: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Payload: payload,
	}
}

// TestInjectionInPayloadIsData: hostile strings in payload values, the
// entity, fork and event IDs are stored as data; the table survives.
func TestInjectionInPayloadIsData(t *testing.T) {
	pool, engine := deployFollowers(t)
	ctx := context.Background()

	hostile := []string{
		injection,
		`" OR 1=1; --`,
		`x'||pg_sleep(5)||'`,
		`$1); DELETE FROM causet_projection_versions; --`,
		`\'; DROP TABLE artist_followers; --`,
		`artist"; DROP TABLE "artist_followers`,
	}
	for i, h := range hostile {
		ev := followed(fmt.Sprintf("evt-%d-%s", i, h), "user-"+h, h)
		ev.ForkID = "production" + h
		res, err := engine.Apply(ctx, "artist_followers", ev)
		require.NoError(t, err)
		require.Equal(t, projection.StatusApplied, res.Status, "%+v", res.Err)

		var n int
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT count(*) FROM artist_followers WHERE user_id = $1 AND artist_id = $2", "user-"+h, h).Scan(&n))
		require.Equal(t, 1, n, "exactly the hostile string is stored: %q", h)
	}
	var table *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('public.artist_followers')::text").Scan(&table))
	require.NotNil(t, table, "artist_followers still exists")
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM artist_followers").Scan(&rows))
	require.Equal(t, len(hostile), rows)
	var stored string
	require.NoError(t, pool.QueryRow(ctx, "SELECT artist_id FROM artist_followers WHERE user_id = $1", "user-"+injection).Scan(&stored))
	require.Equal(t, injection, stored)
	var versions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM causet_projection_versions").Scan(&versions))
	require.Equal(t, 1, versions)

	// A delete keyed by the hostile value removes that row only.
	del := followed("evt-del", "user-"+injection, injection)
	del.EventType = "ARTIST_UNFOLLOWED"
	res, err := engine.Apply(ctx, "artist_followers", del)
	require.NoError(t, err)
	require.Equal(t, projection.StatusApplied, res.Status)
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM artist_followers").Scan(&rows))
	require.Equal(t, len(hostile)-1, rows)
}

// TestInjectionInIRIdentifiersRejected: hostile identifiers in an IR document
// are rejected by Parse/Validate, Deploy refuses them, and nothing reaches the
// database.
func TestInjectionInIRIdentifiersRejected(t *testing.T) {
	base, err := exampleprojections.Document("artist_followers")
	require.NoError(t, err)
	good := string(base)
	cases := map[string]string{
		"table":     strings.Replace(good, "table: artist_followers", `table: "artist_followers; DROP TABLE artist_followers; --"`, 1),
		"name":      strings.Replace(good, "name: artist_followers", `name: "x'); DROP TABLE artist_followers; --"`, 1),
		"key":       strings.Replace(good, "key: [user_id, artist_id]", `key: [user_id, "artist_id\") DO NOTHING; DROP TABLE artist_followers; --"]`, 1),
		"column":    strings.Replace(good, "followed_at: event.occurredAt", `"followed_at\" = now(); DROP TABLE artist_followers; --": event.occurredAt`, 1),
		"quoted":    strings.Replace(good, "table: artist_followers", `table: '"artist_followers"'`, 1),
		"schema":    strings.Replace(good, "table: artist_followers", `table: public.artist_followers`, 1),
		"uppercase": strings.Replace(good, "table: artist_followers", `table: Artist_Followers`, 1),
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, good, doc, "the case changed the document")
			_, err := projection.Parse([]byte(doc))
			require.Error(t, err)
			var ve *projection.ValidationError
			require.ErrorAs(t, err, &ve)
			t.Logf("%v", err)
		})
	}

	// Validate on a document built in code (not via Parse) and Deploy.
	pool := testenv.Postgres(t)
	ctx := context.Background()
	for _, d := range []*projection.Document{
		{Name: "p", SourceEvents: []string{"E"}, Table: `t"; DROP TABLE x; --`, Key: []string{"k"},
			On: map[string]projection.Operation{"E": {Op: projection.OpUpsert, Columns: map[string]string{"k": "event.entityId"}}}},
		{Name: "p", SourceEvents: []string{"E"}, Table: "t", Key: []string{"k"},
			On: map[string]projection.Operation{"E": {Op: projection.OpUpsert, Columns: map[string]string{"k": "event.entityId", `v") VALUES (1); --`: "1"}}}},
		{Name: "p", SourceEvents: []string{"E"}, Table: "t", Key: []string{"k"},
			On: map[string]projection.Operation{"E": {Op: projection.OpIncrement, Columns: map[string]string{"k": "event.entityId"}, Increment: map[string]string{"n = 0; --": "1"}}}},
	} {
		require.Error(t, projection.Validate(d))
		_, err := projection.Deploy(ctx, pool, d)
		require.Error(t, err)
	}
	var exists *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('public.causet_projection_versions')::text").Scan(&exists))
	if exists != nil {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM causet_projection_versions").Scan(&n))
		require.Zero(t, n, "nothing deployed")
	}
}
