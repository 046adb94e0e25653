package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/devstack"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/internal/testenv"
)

// uiDev starts `causet dev args…` with env added and returns it, its banner,
// the Temporal UI's base URL, and a client of its Temporal server; it
// skips (fails in CI) without Chromium or the temporal CLI.
func uiDev(t *testing.T, env []string, args ...string) (dev *devProcess, banner, ui, cli string, tc client.Client) {
	t.Helper()
	if findChromium() == "" {
		if testenv.InCI() {
			t.Fatal("chromium not found: .ci/run installs it (apt-get install -y chromium)")
		}
		t.Skip("chromium not found (apt-get install -y chromium): the Temporal UI check needs a headless browser")
	}
	cli, err := devstack.FindTemporalCLI()
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	root := devRoot(t, "causet-ui-story-")
	dev = startDev(t, append(devTestEnv(t, root), env...), args...)
	banner = dev.waitBanner(t)
	addr := regexp.MustCompile(`Temporal +(127\.0\.0\.1:\d+)`).FindStringSubmatch(banner)
	require.NotNil(t, addr, "no Temporal line:\n%s", banner)
	m := regexp.MustCompile(`Temporal UI:\n +(http://\S+)/namespaces/default/workflows\n`).FindStringSubmatch(banner)
	require.NotNil(t, m, "no Temporal UI line:\n%s", banner)
	tc, err = client.Dial(client.Options{HostPort: addr[1], Namespace: "default"})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	return dev, banner, m[1], cli, tc
}

// runPage is the Temporal UI's page of workflow id's current run.
func runPage(t *testing.T, ctx context.Context, tc client.Client, ui, id string) string {
	t.Helper()
	d, err := tc.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	return ui + "/namespaces/default/workflows/" + url.PathEscape(id) + "/" + d.RawResponse.WorkflowExecutionInfo.Execution.RunId + "/history"
}

// TestTemporalUIShowsADeadLetter runs `causet dev --demo` as a new user would,
// pastes the banner's curl line (its FollowArtist fails: the demo schema
// lacks followed_at) and reads the Temporal UI in headless Chromium once
// the event is dead-lettered: the banner's dead-letters link lists the run
// with its summary (projection, event type, entity, error), and the run's
// page says it was dead-lettered after attempt 5 of 5, where its DLQ record
// is, the command that replays it, and how Temporal's activity attempts map
// to ours. CAUSET_UI_SCREENSHOTS=dir keeps the screenshots.
func TestTemporalUIShowsADeadLetter(t *testing.T) {
	dev, banner, ui, _, tc := uiDev(t, nil, "dev", "--demo", "--rate", "1")
	deadLetters := bannerLine(t, banner, ui+"/namespaces/default/workflows?query=")
	_, err := shell(t, dev.cmd.Env, bannerLine(t, banner, "curl -sS -X POST "))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	id := contract.RetryWorkflowID("artist_followers", "production", "hello-1:1")
	var st contract.Status
	require.Eventually(t, func() bool {
		v, err := tc.QueryWorkflow(ctx, id, "", contract.QueryStatus)
		return err == nil && v.Get(&st) == nil && st.State == contract.StateDeadLettered
	}, 2*time.Minute, time.Second, "%s not dead-lettered\n%s", id, dev.logs)
	require.NotNil(t, st.DLQ)

	// The list with the columns the README says to add (the UI keeps them
	// per namespace in the browser's storage, as its column picker does).
	b := startBrowser(t, findChromium())
	b.open(t, ui+"/namespaces/default/workflows", func(s string) bool { return strings.Contains(s, "Workflows") }, 60*time.Second)
	b.eval(t, `localStorage.setItem('namespace-workflow-table-columns', JSON.stringify({default: [`+uiColumns+`]}))`)
	text := b.open(t, deadLetters, func(s string) bool { return strings.Contains(s, id) && strings.Contains(s, "dead_lettered") }, 60*time.Second)
	saveScreenshot(t, b, "ui-dead-letters.png")
	for _, w := range []string{"CausetRetryState", "CausetProjection", "CausetError", "dead_lettered", "artist_followers", "ARTIST_FOLLOWED", "fan-1",
		`column "followed_at" of relation "artist_followers" does not exist`} {
		require.Contains(t, text, w, "the dead letters' list shows what failed and where it stands:\n%s", text)
	}

	want := []string{
		"Dead-lettered",
		"after attempt 5 of 5",
		"DLQ record: " + st.DLQ.Topic + " partition " + strconv.Itoa(int(st.DLQ.Partition)) + " offset " + strconv.FormatInt(st.DLQ.Offset, 10),
		"temporal workflow signal --workflow-id '" + id + "' --name replay",
		"Attempts 2–5 run as one ApplyProjection activity: its attempt k in the UI is attempt k+1 here.",
	}
	text = b.openTab(t, runPage(t, ctx, tc, ui, id), "User Metadata", want)
	saveScreenshot(t, b, "ui-dead-lettered-run.png")
	for _, w := range want {
		require.Contains(t, text, w, "the dead-lettered run's page:\n%s", text)
	}
	dev.interrupt(t)
}

// TestTemporalUIShowsAQuietIncident runs `causet dev --demo` (3 intents/s) under
// CAUSET_INCIDENT_POLICY=hold (threshold 5): the demo's PlayTrack events of
// days 0 fail with a division by zero, and an incident holds them. The
// incidents' list shows its summary, its page its current details, and
// over three minutes of hold with events flowing its history grows by
// fewer than 50 events a minute.
func TestTemporalUIShowsAQuietIncident(t *testing.T) {
	dev, _, ui, cli, tc := uiDev(t, []string{"CAUSET_INCIDENT_POLICY=hold", "CAUSET_INCIDENT_THRESHOLD=5"}, "dev", "--demo")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	addr := regexp.MustCompile(`Temporal +(127\.0\.0\.1:\d+)`).FindStringSubmatch(dev.out.String())[1]

	var inc string
	require.Eventually(t, func() bool {
		out, err := exec.Command(cli, "workflow", "list", "--address", addr, "--namespace", "default",
			"--query", incidentQuery+` AND CausetProjection="artist_stats" AND CausetIncidentState="holding"`, "-o", "json").Output()
		if err != nil {
			return false
		}
		var rows []struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
		}
		if json.Unmarshal(out, &rows) != nil || len(rows) == 0 {
			return false
		}
		inc = rows[0].Execution.WorkflowID
		return inc != ""
	}, 2*time.Minute, time.Second, "no holding incident\n%s", dev.logs)

	b := startBrowser(t, findChromium())
	b.open(t, ui+"/namespaces/default/workflows", func(s string) bool { return strings.Contains(s, "Workflows") }, 60*time.Second)
	b.eval(t, `localStorage.setItem('namespace-workflow-table-columns', JSON.stringify({default: [`+uiColumns+`]}))`)
	text := b.open(t, ui+"/namespaces/default/workflows?query="+url.QueryEscape(incidentQuery),
		func(s string) bool { return strings.Contains(s, inc) && strings.Contains(s, "holding") }, 60*time.Second)
	saveScreenshot(t, b, "ui-incidents.png")
	for _, w := range []string{"CausetIncidentState", inc, "holding", "artist_stats"} {
		require.Contains(t, text, w, "the incidents' list:\n%s", text)
	}

	// Three minutes of hold with the demo's events flowing.
	d, err := tc.DescribeWorkflow(ctx, inc, "")
	require.NoError(t, err)
	opened := d.RawResponse.WorkflowExecutionInfo.StartTime.AsTime()
	time.Sleep(time.Until(opened.Add(3 * time.Minute)))
	n := historyLength(t, ctx, tc, inc)
	held := time.Since(opened)
	perMinute := float64(n) / held.Minutes()
	t.Logf("incident %s: %d history events in %s of hold: %.1f a minute", inc, n, held.Round(time.Second), perMinute)
	require.Less(t, perMinute, 50.0, "a quiet incident")

	want := []string{"incident · artist_stats · hold · on.TRACK_PLAYED", "holding · ", " held · ", "It resolves when a probe applies sample event",
		"Policy hold", "wait for probe"}
	text = b.openTab(t, runPage(t, ctx, tc, ui, inc), "User Metadata", want)
	saveScreenshot(t, b, "ui-incident.png")
	for _, w := range want {
		require.Contains(t, text, w, "the incident's page:\n%s", text)
	}
	dev.interrupt(t)
}

// uiColumns are the workflow list's columns the README has users add:
// each run's or incident's state, its projection, event type, entity and
// error beside its ID.
const uiColumns = `{"label":"Status"},{"label":"CausetRetryState"},{"label":"CausetIncidentState"},{"label":"CausetProjection"},{"label":"CausetEventType"},{"label":"CausetEntityId"},{"label":"CausetError"},{"label":"Workflow ID"},{"label":"Start"}`

// openTab opens a run's page, clicks its tab named tab, and returns the
// page's text once it holds every one of want (or after a minute).
func (b *browser) openTab(t *testing.T, page, tab string, want []string) string {
	t.Helper()
	b.open(t, page, func(s string) bool { return strings.Contains(s, tab) }, 60*time.Second)
	var text string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		b.eval(t, `Array.from(document.querySelectorAll('button, a, [role=tab]')).find(e => e.innerText.trim() === `+strconv.Quote(tab)+`)?.click()`)
		// The UI renders summaries and details (Markdown) in iframes of
		// their own: their text is read from their documents.
		text = b.eval(t, `document.body.innerText + "\n" +
			Array.from(document.querySelectorAll('iframe')).map(f => f.contentDocument ? f.contentDocument.body.innerText
				: new DOMParser().parseFromString(f.srcdoc || '', 'text/html').body.textContent).join("\n")`)
		if containsAll(text, want) {
			time.Sleep(500 * time.Millisecond)
			return text
		}
	}
	return text
}

func containsAll(s string, subs []string) bool {
	for _, w := range subs {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// historyLength is the number of events in workflow id's history.
func historyLength(t *testing.T, ctx context.Context, tc client.Client, id string) int {
	t.Helper()
	n := 0
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		_, err := it.Next()
		require.NoError(t, err)
		n++
	}
	return n
}

// TestTemporalUIShowsARollout runs `causet dev --demo`, whose PlayTrack
// events of days 0 are dead-lettered (division by zero), then rolls out
// artist_stats with the division guarded at one replay a second: its
// page's current details say where it is and its counts, the rollouts'
// list shows its search attributes, and it ends done.
func TestTemporalUIShowsARollout(t *testing.T) {
	dev, banner, ui, _, tc := uiDev(t, nil, "dev", "--demo")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := `WorkflowType="ProjectionRetryWorkflow" AND CausetProjection="artist_stats" AND CausetRetryState="dead_lettered"`
	require.Eventually(t, func() bool {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: q})
		return err == nil && len(resp.GetExecutions()) >= 5
	}, 3*time.Minute, time.Second, "fewer than 5 dead letters of artist_stats\n%s", dev.logs)

	doc, err := exampleprojections.Document("artist_stats")
	require.NoError(t, err)
	fixed := strings.Replace(string(doc), "plays_per_day: event.payload.plays / event.payload.days",
		`plays_per_day: "event.payload.days == 0 ? 0 : event.payload.plays / event.payload.days"`, 1)
	require.NotEqual(t, string(doc), fixed)
	file := filepath.Join(t.TempDir(), "artist_stats.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fixed), 0o644))
	env := append(slices.Clone(dev.cmd.Env), "DATABASE_URL="+exportedValue(t, banner, "DATABASE_URL"), "KAFKA_BROKERS="+exportedValue(t, banner, "KAFKA_BROKERS"))
	out, err := shell(t, env, binary+" projections rollout "+file+" --rate 1 --no-wait --reason 'guard days 0'")
	require.NoError(t, err, out)
	m := regexp.MustCompile(`rollout (projection-rollout:artist_stats:2:[0-9a-f]{12}) \(run`).FindStringSubmatch(out)
	require.NotNil(t, m, "the command names the rollout's ID (projection, version, candidate hash):\n%s", out)
	id := m[1]

	b := startBrowser(t, findChromium())
	b.open(t, ui+"/namespaces/default/workflows", func(s string) bool { return strings.Contains(s, "Workflows") }, 60*time.Second)
	b.eval(t, `localStorage.setItem('namespace-workflow-table-columns', JSON.stringify({default: [`+rolloutColumns+`]}))`)
	want := []string{"version 2 deployed", " affected: check said ", " would apply", " replayed · ", " applied", " pending"}
	text := b.openTab(t, runPage(t, ctx, tc, ui, id), "User Metadata", want)
	saveScreenshot(t, b, "ui-rollout.png")
	for _, w := range want {
		require.Contains(t, text, w, "the rollout's page:\n%s", text)
	}
	text = b.open(t, ui+"/namespaces/default/workflows?query="+url.QueryEscape(`WorkflowType="ProjectionRolloutWorkflow"`),
		func(s string) bool { return strings.Contains(s, id) && strings.Contains(s, "CausetRolloutApplied") }, 60*time.Second)
	saveScreenshot(t, b, "ui-rollouts.png")
	for _, w := range []string{"CausetRolloutAffected", "CausetRolloutApplied", "CausetRolloutFailing", id, "artist_stats"} {
		require.Contains(t, text, w, "the rollouts' list:\n%s", text)
	}
	var p contract.RolloutProgress
	require.NoError(t, tc.GetWorkflow(ctx, id, "").Get(ctx, &p))
	require.Equal(t, contract.RolloutDone, p.State, p.Reason)
	require.Equal(t, p.WouldApply, p.Applied)
	dev.interrupt(t)
}

// rolloutColumns are the rollouts' list columns docs/OPERATING.md has
// users add.
const rolloutColumns = `{"label":"Status"},{"label":"CausetProjection"},{"label":"CausetRolloutAffected"},{"label":"CausetRolloutApplied"},{"label":"CausetRolloutFailing"},{"label":"Workflow ID"},{"label":"Start"}`

// exportedValue is the value of the banner's `export NAME=...` line.
func exportedValue(t *testing.T, banner, name string) string {
	t.Helper()
	line := bannerLine(t, banner, "export "+name+"=")
	return strings.Trim(strings.TrimPrefix(line, "export "+name+"="), "'\"")
}
