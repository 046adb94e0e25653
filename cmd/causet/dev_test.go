package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/internal/testenv"
)

// liveProcsMentioning returns live processes whose command line contains s.
func liveProcsMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
				continue
			}
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// bannerLine returns the line of the banner that starts (after its
// indent) with prefix, without the indent.
func bannerLine(t *testing.T, banner, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(banner, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no banner line starting with %q:\n%s", prefix, banner)
	return ""
}

// shell runs line with sh -c, as a user pasting it would, with env.
func shell(t *testing.T, env []string, line string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Env = env
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return string(out), err
}

// TestDevKafkaSmoke runs the causet binary's `dev --demo` with no service
// environment set (KAFKA_BROKERS is kept under `make test-kafka`). It pastes
// the banner's curl and submit lines: the runtime answers 200 SUCCESS (the
// same body again for the same intentId), the relay publishes the events
// and the bridge applies the PlayTrack's and hands the demo-failing
// FollowArtist's to Temporal. It waits until the temporal CLI lists a
// dead-lettered workflow, then sends SIGINT as Ctrl-C does and checks that
// no child process, no temp dir and no listening runtime remain.
// devRoot is a temp dir for a `causet dev`'s own temp dirs, removed at
// cleanup; readable by all, since initdb runs as postgres when root.
func devRoot(t *testing.T, prefix string) string {
	t.Helper()
	root, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(root, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	return root
}

// devTestEnv is the environment of a `causet dev` a test starts: this
// process's, without the services' variables (dev starts its own: temp dirs
// under root), with a task queue of the test's and, against a real broker,
// topics and a group of the test's.
func devTestEnv(t *testing.T, root string) []string {
	t.Helper()
	env := []string{"TMPDIR=" + root, "CAUSET_TASK_QUEUE=" + testenv.TaskQueue(t)}
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TMPDIR", "CAUSET_TASK_QUEUE", "CAUSET_RUNTIME_ADDR",
			"CAUSET_PAYLOAD_KEYS", "CAUSET_PAYLOAD_KEYS_FILE", "CAUSET_CODEC_ADDR", "CAUSET_CODEC_CORS_ORIGIN":
		case "KAFKA_BROKERS":
			if testenv.IsRealKafka() {
				env = append(env, kv)
			}
		default:
			env = append(env, kv)
		}
	}
	if testenv.IsRealKafka() {
		env = append(env,
			"CAUSET_EVENTS_TOPIC="+testenv.Topic(t, "causet.events.v1"),
			"CAUSET_DLQ_TOPIC="+testenv.Topic(t, "causet.projection-dlq.v1"),
			"CAUSET_CONSUMER_GROUP="+testenv.Topic(t, "causet-projection-worker"))
	}
	return env
}

// devProcess is a `causet` command a test runs in the background, its
// stdout and stderr kept.
type devProcess struct {
	cmd       *exec.Cmd
	out, logs *testenv.LogBuffer
	done      chan error
}

// startDev runs the binary with args and env; it is killed at cleanup if
// still running. It runs in the package directory and finds ./bin/temporal
// upwards.
func startDev(t *testing.T, env []string, args ...string) *devProcess {
	t.Helper()
	d := &devProcess{cmd: exec.Command(binary, args...), out: &testenv.LogBuffer{}, logs: &testenv.LogBuffer{}, done: make(chan error, 1)}
	d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = env, d.out, d.logs
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
		}
	})
	return d
}

// waitBanner waits for `causet dev`'s banner, printed once everything runs,
// and returns it; the command must not have exited.
func (d *devProcess) waitBanner(t *testing.T) string {
	t.Helper()
	var exited bool
	var exitErr error
	require.Eventually(t, func() bool {
		select {
		case exitErr = <-d.done:
			exited = true
			return true
		default:
		}
		return strings.Contains(d.out.String(), "Other shells reach this stack with:")
	}, 3*time.Minute, 200*time.Millisecond, "no banner:\n%s", d.out)
	require.False(t, exited, "causet dev returned early: %v\n%s\n%s", exitErr, d.out, d.logs)
	return d.out.String()
}

// interrupt sends Ctrl-C and requires a clean exit within 90 s.
func (d *devProcess) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(os.Interrupt))
	select {
	case err := <-d.done:
		require.NoError(t, err, "causet dev exits 0 on Ctrl-C\n%s", d.logs)
	case <-time.After(90 * time.Second):
		t.Fatal("causet dev did not stop within 90s of Ctrl-C")
	}
}

func TestDevKafkaSmoke(t *testing.T) {
	cli, err := devstack.FindTemporalCLI()
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the banner's curl line cannot be pasted")
	}
	root := devRoot(t, "causet-dev-smoke-")

	env := devTestEnv(t, root)
	dev := startDev(t, env, "dev", "--demo", "--rate", "10")
	out, logs := dev.out, dev.logs
	banner := dev.waitBanner(t)
	// The banner names the Temporal address, the runtime and the dead-letter UI link.
	tm := regexp.MustCompile(`Temporal +(127\.0\.0\.1:\d+)`).FindStringSubmatch(banner)
	require.NotNil(t, tm, "no Temporal line:\n%s", banner)
	addr := tm[1]
	require.Contains(t, banner, "/namespaces/default/workflows?query=CausetRetryState%3D%22dead_lettered%22")
	require.Contains(t, banner, `workflow signal`)
	require.Contains(t, banner, `--name replay --input '{"reason":"fixed"}'`)
	for _, intentType := range []string{"FollowArtist", "PlayTrack", "UnfollowArtist"} {
		require.Regexp(t, `Intent +`+intentType+` version \d+ \(deployed`, banner)
	}
	require.Contains(t, banner, "PlayTrack version 1 (deployed; demo: without its days_positive rule)")
	runtimeURL := regexp.MustCompile(`Runtime +(http://127\.0\.0\.1:\d+) `).FindStringSubmatch(banner)
	require.NotNil(t, runtimeURL, "no runtime line:\n%s", banner)
	base := runtimeURL[1]
	runtimeHostPort := strings.TrimPrefix(base, "http://")

	// The banner's curl line, pasted: 200 SUCCESS with the event; pasted
	// again, the same recorded answer.
	curl := bannerLine(t, banner, "curl -sS -X POST ")
	require.Contains(t, curl, base+"/v1/intents")
	first, err := shell(t, env, curl+` -w '\n%{http_code}'`)
	require.NoError(t, err, "the banner's curl line fails: %s", curl)
	require.True(t, strings.HasSuffix(first, "\n200"), "curl answered %s", first)
	body := strings.TrimSuffix(first, "\n200")
	var answer struct {
		Status   string
		IntentID string
		Events   []struct{ EventID, EventType string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	require.Equal(t, "SUCCESS", answer.Status, body)
	require.Equal(t, "hello-1", answer.IntentID)
	require.Len(t, answer.Events, 1)
	require.Equal(t, "hello-1:1", answer.Events[0].EventID)
	require.Equal(t, "ARTIST_FOLLOWED", answer.Events[0].EventType)
	again, err := shell(t, env, curl)
	require.NoError(t, err)
	require.Equal(t, body, again, "the same intentId answers the recorded body")
	status, err := shell(t, env, bannerLine(t, banner, "curl -sS "+base+"/v1/intents/hello-1"))
	require.NoError(t, err)
	require.Contains(t, status, `"status":"succeeded"`)

	// The banner's submit line, pasted: one SUCCESS line.
	submit := bannerLine(t, banner, "echo '")
	submitted, err := shell(t, env, submit)
	require.NoError(t, err, "the banner's submit line fails: %s", submit)
	m := regexp.MustCompile(`^stdin:1\t(\S+)\tSUCCESS\tevents=1\n$`).FindStringSubmatch(submitted)
	require.NotNil(t, m, "submit printed %q", submitted)
	playEventID := m[1] + ":1"

	// The relay publishes both events; the bridge applies the PlayTrack's
	// (its dedupe-ledger row) and hands the FollowArtist's, which fails on
	// the demo's artist_followers, to Temporal.
	dbURL := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(banner)
	require.NotNil(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL[1])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM causet_projection_applied
			WHERE projection = 'artist_stats' AND key = causet_applied_key('artist_stats', 'production', $1)`, playEventID).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 100*time.Millisecond, "%s not applied\n%s", playEventID, logs)
	var published int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM causet_events WHERE event_id IN ('hello-1:1', $1) AND published_at IS NOT NULL`, playEventID).Scan(&published))
	require.Equal(t, 2, published, "the relay marked both events published")
	require.NoError(t, conn.Close(ctx))
	helloWorkflow := contract.RetryWorkflowID("artist_followers", "production", "hello-1:1")
	require.Eventually(t, func() bool {
		b, err := exec.Command(cli, "workflow", "describe", "--address", addr, "--namespace", "default",
			"--workflow-id", helloWorkflow, "-o", "json").Output()
		return err == nil && strings.Contains(string(b), helloWorkflow)
	}, 30*time.Second, 500*time.Millisecond, "%s not started\n%s", helloWorkflow, logs)

	// A dead-lettered workflow shows up in the temporal CLI's list.
	var listed string
	require.Eventually(t, func() bool {
		cmd := exec.Command(cli, "workflow", "list", "--address", addr, "--namespace", "default",
			"--query", `CausetRetryState="dead_lettered"`, "-o", "json")
		b, err := cmd.Output()
		if err != nil {
			return false
		}
		var rows []map[string]any
		if json.Unmarshal(b, &rows) != nil || len(rows) == 0 {
			return false
		}
		listed = string(b)
		return true
	}, 90*time.Second, time.Second, "no dead-lettered workflow listed\n%s", out)
	require.Contains(t, listed, "projection-retry:")
	require.Contains(t, logs.String(), `"msg":"projection_retry"`)
	require.NotContains(t, logs.String(), `"msg":"demo intent not submitted"`)

	// Ctrl-C.
	dev.interrupt(t)
	require.Contains(t, out.String(), "stopped everything it started")
	require.Contains(t, logs.String(), `"msg":"runtime stopped"`)
	require.Contains(t, logs.String(), `"msg":"relay stopped"`)
	require.Eventually(t, func() bool { return len(liveProcsMentioning(root)) == 0 }, 10*time.Second, 100*time.Millisecond,
		"processes left: %v", liveProcsMentioning(root))
	pidRE := regexp.MustCompile(`"msg":"temporal dev server started".*"pid":(\d+)`)
	pm := pidRE.FindStringSubmatch(logs.String())
	require.NotNil(t, pm, "temporal pid not logged")
	require.Empty(t, liveProcsMentioning("--port "+strings.Split(addr, ":")[1]+" "), "temporal dev server (pid %s) still running", pm[1])
	_, err = os.Stat("/proc/" + pm[1])
	require.True(t, os.IsNotExist(err), "temporal dev server pid %s still exists", pm[1])
	for _, hp := range []string{addr, runtimeHostPort} {
		c, err := net.DialTimeout("tcp", hp, time.Second)
		if err == nil {
			c.Close()
		}
		require.Error(t, err, "%s still listens", hp)
	}
	left, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, left, "temp dirs left behind")
}

// TestDevBanner prints the banner of a stack started here in demo mode and
// on a runtime address other than the default.
func TestDevBanner(t *testing.T) {
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	stack := &devstack.Stack{
		DatabaseURL:  "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		TemporalUI:   "http://127.0.0.1:8233",
		KafkaBrokers: []string{"127.0.0.1:9092"},
		Postgres:     &devstack.Postgres{},
		Temporal:     &devstack.Temporal{HostPort: "127.0.0.1:7233"},
		Kafka:        &devstack.Kafka{},
	}
	v := devBanner{demo: true, rate: 3, cfg: cfg, stack: stack, namespace: "default", cli: "./bin/temporal", self: "./bin/causet",
		handlers: []devstack.Deployed{
			{Name: "FollowArtist", Version: 1, New: true},
			{Name: "PlayTrack", Version: 2, New: true, Note: "demo: without its days_positive rule"},
			{Name: "UnfollowArtist", Version: 1},
		},
		projections:    []devstack.Deployed{{Name: "artist_followers", Version: 1, New: true}},
		runtimeURL:     "http://127.0.0.1:8080",
		runtimeDefault: true,
	}
	var b bytes.Buffer
	printDevBanner(&b, v)
	banner := b.String()
	for _, want := range []string{
		"  Runtime       http://127.0.0.1:8080  POST /v1/intents, GET /v1/intents/{intentId}, /metrics\n",
		"  Intent        FollowArtist version 1 (deployed)\n",
		"  Intent        PlayTrack version 2 (deployed; demo: without its days_positive rule)\n",
		"  Intent        UnfollowArtist version 1 (already deployed)\n",
		"  Relay         ledger events -> causet.events.v1\n",
		"  Projection    artist_followers version 1 (deployed)\n",
		"  curl -sS -X POST http://127.0.0.1:8080/v1/intents -H 'Content-Type: application/json' -d '" +
			`{"intentId":"hello-1","intentType":"FollowArtist","entityId":"fan-1","forkId":"production","payload":{"artistId":"artist-1"}}'` + "\n",
		"  curl -sS http://127.0.0.1:8080/v1/intents/hello-1\n",
		`  echo '{"intentType":"PlayTrack","entityId":"listener-1","forkId":"production","payload":{"artistId":"artist-1","trackId":"track-1","plays":3,"days":1}}' | ./bin/causet submit` + "\n",
		"Dead letters in the UI:\n  http://127.0.0.1:8233/namespaces/default/workflows?query=CausetRetryState%3D%22dead_lettered%22\n" +
			"  (list: the gear icon adds the columns CausetRetryState, CausetIncidentState, CausetProjection, CausetEventType, CausetEntityId, CausetError; " +
			"a run: its User Metadata tab says what failed, where it stands and how to replay it)\n",
		"Demo: 3 intents/s",
		"PlayTrack is deployed without its days_positive rule",
		"  ./bin/causet intents deploy ",
	} {
		require.Contains(t, banner, want)
	}
	require.NotContains(t, banner, "CAUSET_RUNTIME_ADDR", "the default address needs no export")
	require.NotContains(t, banner, "Codec server", "no codec server without payload keys")

	v.codecURL, v.codecKey = "http://127.0.0.1:8081", "k2"
	b.Reset()
	printDevBanner(&b, v)
	banner = b.String()
	require.Contains(t, banner, "  Codec server  http://127.0.0.1:8081  payloads are encrypted (key k2); the UI decodes them here  [started here, stopped on Ctrl-C]\n")
	require.Contains(t, banner, "  ./bin/temporal workflow show --codec-endpoint http://127.0.0.1:8081 -w projection-retry:<projection>:<forkId>:<eventId>\n")
	v.codecURL, v.codecKey = "", ""

	v.demo, v.runtimeURL, v.runtimeDefault = false, "http://127.0.0.1:41234", false
	b.Reset()
	printDevBanner(&b, v)
	banner = b.String()
	require.Contains(t, banner, "| ./bin/causet submit --url http://127.0.0.1:41234\n")
	require.Contains(t, banner, "  export CAUSET_RUNTIME_ADDR=127.0.0.1:41234\n")
	require.NotContains(t, banner, "Demo:")
}

func TestRuntimeBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"0.0.0.0:9000":   "http://127.0.0.1:9000",
		"[::]:9000":      "http://127.0.0.1:9000",
		"[::1]:9000":     "http://[::1]:9000",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		require.Equal(t, want, runtimeBaseURL(a), addr)
	}
}

// TestDemoIntentLogs: the demo's own intent_outcome lines go to DEBUG,
// everything else is untouched.
func TestDemoIntentLogs(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var b bytes.Buffer
		l := slog.New(demoIntentLogs{Handler: slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: level}), prefix: "demo-120000-"}).With("component", "runtime")
		l.Info("intent_outcome", "event", "intent_outcome", "intentId", "demo-120000-000001", "status", "success")
		l.Info("intent_outcome", "event", "intent_outcome", "intentId", "hello-1", "status", "success")
		l.Info("runtime started", "intentId", "demo-120000-000001")
		got := b.String()
		require.Contains(t, got, `"intentId":"hello-1"`)
		require.Contains(t, got, `"msg":"runtime started"`)
		if level == slog.LevelInfo {
			require.NotContains(t, got, `"intentId":"demo-120000-000001","status"`)
		} else {
			require.Contains(t, got, `{"time":`)
			require.Regexp(t, `"level":"DEBUG","msg":"intent_outcome","component":"runtime","event":"intent_outcome","intentId":"demo-120000-000001"`, got)
		}
	}
}
