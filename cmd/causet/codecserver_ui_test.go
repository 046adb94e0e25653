package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/proc"
)

// TestTemporalUIDecodesWithCodecServer starts a dev server whose UI uses
// `causet codec-server` as its codec endpoint (--ui-codec-endpoint), starts
// a retry workflow with an encrypting client, and opens the workflow's page
// in headless Chromium: the Input card shows the event's payload in
// plaintext. With the codec server stopped, the same page shows only the
// encrypted payload. CAUSET_UI_SCREENSHOTS=dir keeps both screenshots.
func TestTemporalUIDecodesWithCodecServer(t *testing.T) {
	chromium := findChromium()
	if chromium == "" {
		t.Skip("chromium not found (apt-get install -y chromium): the Temporal UI check needs a headless browser")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	codecAddr := freeAddr(t)
	srv, err := proc.StartTemporal(ctx, proc.TemporalOptions{UICodecEndpoint: "http://" + codecAddr, TempDirPrefix: "causet-ui-codec-"})
	if err != nil {
		t.Skipf("no Temporal dev server with UI: %v", err)
	}
	t.Cleanup(func() {
		srv.Halt()
		srv.Stop()
	})
	k1 := codecTestKey(t)
	_, _, stopCodec := startCodecServer(t, codecAddr, "CAUSET_PAYLOAD_KEYS=k1:"+k1, "CAUSET_CODEC_CORS_ORIGIN="+srv.UIURL)

	keys, err := config.LoadPayloadKeys(envLookup(config.EnvPayloadKeys, "k1:"+k1))
	require.NoError(t, err)
	tc, err := app.DialTemporal(ctx, slog.New(slog.DiscardHandler), app.TemporalOptions{HostPort: srv.HostPort, PayloadKeys: &keys})
	require.NoError(t, err)
	defer tc.Close()

	const marker = "ui-decoded-artist-3f9d1a"
	in := contract.RetryInput{
		Event: event.Envelope{EventID: "ui-1", EventType: "ARTIST_FOLLOWED", EntityID: "user-ui", ForkID: "production",
			Payload: []byte(`{"artistId":"` + marker + `"}`)},
		Projection: "artist_followers", Mode: config.ModeWorkflow, Retry: config.DefaultRetry(), ReplayWindow: time.Hour,
	}
	// No worker polls this queue: the run stays at its start, which holds
	// the input.
	run, err := tc.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: in.WorkflowID(), TaskQueue: "ui-codec-no-worker"},
		contract.RetryWorkflowName, in)
	require.NoError(t, err)

	// What the server stores holds no plaintext.
	it := tc.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		b, err := proto.Marshal(e)
		require.NoError(t, err)
		require.NotContains(t, string(b), marker)
	}

	page := fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/history", srv.UIURL, srv.Namespace, run.GetID(), run.GetRunID())
	b := startBrowser(t, chromium)
	text := b.open(t, page, func(text string) bool { return strings.Contains(text, marker) }, 60*time.Second)
	saveScreenshot(t, b, "ui-with-codec.png")
	require.Contains(t, text, marker, "the UI did not show the decoded input; page text:\n%s", text)
	require.Contains(t, text, "Input")

	// Without the codec server the UI can only show the ciphertext.
	stopCodec()
	encrypted := base64.StdEncoding.EncodeToString([]byte("binary/encrypted"))
	text = b.open(t, page, func(text string) bool { return strings.Contains(text, encrypted) }, 60*time.Second)
	saveScreenshot(t, b, "ui-without-codec.png")
	require.Contains(t, text, encrypted, "page text:\n%s", text)
	require.NotContains(t, text, marker)
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func saveScreenshot(t *testing.T, b *browser, name string) {
	t.Helper()
	dir := os.Getenv("CAUSET_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := b.screenshot(t)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	t.Logf("screenshot: %s", filepath.Join(dir, name))
}

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4), so no
// WebSocket client is needed.
type browser struct {
	in      io.WriteCloser
	session string

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan cdpMessage
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"`
}

func startBrowser(t *testing.T, chromium string) *browser {
	t.Helper()
	toChrome, in, err := os.Pipe()
	require.NoError(t, err)
	out, fromChrome, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	require.NoError(t, cmd.Start())
	toChrome.Close()
	fromChrome.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	b := &browser{in: in, waiting: map[int]chan cdpMessage{}}
	go b.read(out)
	t.Cleanup(func() {
		_, _ = b.call("", "Browser.close", nil, 5*time.Second)
		in.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		out.Close()
	})

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.must(t, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.must(t, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.must(t, b.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1400, "height": 1200, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) read(out io.Reader) {
	r := bufio.NewReader(out)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

func (b *browser) call(session, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: params, SessionID: session})
	if err != nil {
		return nil, err
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, m.Error)
		}
		return m.Result, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("%s: no answer within %s", method, timeout)
	}
}

func (b *browser) must(t *testing.T, session, method string, params, result any) {
	t.Helper()
	raw, err := b.call(session, method, params, 30*time.Second)
	require.NoError(t, err)
	if result != nil {
		require.NoError(t, json.Unmarshal(raw, result))
	}
}

// eval runs expression in the page and returns its value as a string.
func (b *browser) eval(t *testing.T, expression string) string {
	t.Helper()
	var ev struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	b.must(t, b.session, "Runtime.evaluate", map[string]any{"expression": expression, "returnByValue": true}, &ev)
	s, _ := ev.Result.Value.(string)
	return s
}

// open navigates to url and returns the page's text once done accepts it,
// or as it is when within has passed.
func (b *browser) open(t *testing.T, url string, done func(string) bool, within time.Duration) string {
	t.Helper()
	b.must(t, b.session, "Page.navigate", map[string]any{"url": url}, nil)
	var text string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if text = b.eval(t, "document.body ? document.body.innerText : ''"); done(text) {
			// Let the page settle before a screenshot.
			time.Sleep(500 * time.Millisecond)
			return text
		}
		if strings.Contains(text, "Internal Error") {
			t.Logf("the UI showed its error page: navigating again (%.200q)", text)
			time.Sleep(time.Second)
			b.must(t, b.session, "Page.navigate", map[string]any{"url": url}, nil)
		}
	}
	return text
}

func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	b.must(t, b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(t, err)
	return png
}
