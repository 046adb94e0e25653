package observability_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

const (
	rulesFile     = "causet-alerts.rules.yml"
	dashboardFile = "causet-dashboard.json"
	readmeFile    = "README.md"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func promql() parser.Parser { return parser.NewParser(parser.Options{}) }

// loadRules parses the rules file as Prometheus loads it: unknown fields are
// errors, metric and label names must be valid, templates must parse.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.LegacyValidation, promql(), quiet())
	require.Empty(t, errs, "%s does not load", rulesFile)
	require.NotNil(t, groups)
	require.NotEmpty(t, groups.Groups)
	return groups
}

// selectors are the metrics an expression reads: exact names, and the
// __name__ matchers of selectors that name no single metric (a regular
// expression), each of which must match some exported name.
type selectors struct {
	names    map[string][]string // name → where it is used
	patterns map[string]*labels.Matcher
}

func newSelectors() *selectors {
	return &selectors{names: map[string][]string{}, patterns: map[string]*labels.Matcher{}}
}

// add parses expr and records the metric of each vector selector in it.
func (s *selectors) add(t *testing.T, where, expr string) {
	t.Helper()
	e, err := promql().ParseExpr(expr)
	require.NoError(t, err, "%s: %s", where, expr)
	found := 0
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		found++
		s.addSelector(t, where, vs.Name, vs.LabelMatchers)
		return nil
	})
	require.Positive(t, found, "%s reads no metric: %s", where, expr)
}

func (s *selectors) addSelector(t *testing.T, where, name string, matchers []*labels.Matcher) {
	t.Helper()
	if name != "" {
		s.names[name] = append(s.names[name], where)
		return
	}
	for _, m := range matchers {
		if m.Name != model.MetricNameLabel {
			continue
		}
		switch m.Type {
		case labels.MatchEqual:
			s.names[m.Value] = append(s.names[m.Value], where)
		case labels.MatchRegexp:
			s.patterns[m.String()] = m
		default:
			t.Fatalf("%s: a negative __name__ matcher (%s) names no metric to check", where, m)
		}
		return
	}
	t.Fatalf("%s: a selector without a metric name", where)
}

// grafanaVar matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and [[name]].
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// grafanaValues are what the dashboard's variables stand for in PromQL: the
// interval variables become durations and a projection regex matches any.
// A variable not listed here is an error, so a typo cannot slip through.
var grafanaValues = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"projection":      ".*",
}

// toPromQL replaces Grafana's variables in expr with values PromQL parses.
func toPromQL(expr string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		m := grafanaVar.FindStringSubmatch(v)
		name := m[1] + m[2] + m[3]
		val, ok := grafanaValues[name]
		if !ok {
			unknown = append(unknown, name)
		}
		return val
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown Grafana variables %v in %q", unknown, expr)
	}
	return out, nil
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's.
	Panels []panel `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasourceRef  `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	require.NoError(t, dec.Decode(&d), "%s is not JSON", dashboardFile)
	return d
}

// allPanels are the dashboard's panels with those nested in rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// labelValues matches Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// variableQuery is a query variable's PromQL text (an object in current
// Grafana, a string in older exports).
func variableQuery(t *testing.T, v variable) string {
	t.Helper()
	var q struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
		return q.Query
	}
	var s string
	require.NoError(t, json.Unmarshal(v.Query, &s), "variable %s: query", v.Name)
	return s
}

// wantedMetrics are the metrics the rules and the dashboard read.
func wantedMetrics(t *testing.T) *selectors {
	t.Helper()
	s := newSelectors()
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			s.add(t, "rule "+r.Alert+r.Record, r.Expr)
		}
	}
	d := loadDashboard(t)
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			expr, err := toPromQL(tg.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			s.add(t, fmt.Sprintf("panel %q %s", p.Title, tg.RefID), expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := variableQuery(t, v)
		m := labelValues.FindStringSubmatch(q)
		require.NotNil(t, m, "variable %s: want label_values(selector, label), got %q", v.Name, q)
		matchers, err := promql().ParseMetricSelector(m[1])
		require.NoError(t, err, "variable %s: %q", v.Name, q)
		s.addSelector(t, "variable "+v.Name, "", matchers)
	}
	return s
}

// TestRules loads the rules as Prometheus does and checks each alert has a
// severity, a pending period, a summary, a description and a runbook
// section in README.md.
func TestRules(t *testing.T) {
	groups := loadRules(t)
	readme, err := os.ReadFile(readmeFile)
	require.NoError(t, err)
	anchors := markdownAnchors(string(readme))

	seen := map[string]bool{}
	n := 0
	for _, g := range groups.Groups {
		require.True(t, strings.HasPrefix(g.Name, "causet-"), "group %s", g.Name)
		require.NotEmpty(t, g.Rules, "group %s", g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: only alerting rules here (record %q)", g.Name, r.Record)
			require.False(t, seen[r.Alert], "alert %s defined twice", r.Alert)
			seen[r.Alert] = true
			n++
			require.Regexp(t, `^Causet[A-Z]\w+$`, r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], "alert %s: severity", r.Alert)
			require.LessOrEqual(t, time.Duration(r.For), time.Hour, "alert %s: for", r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["summary"]), "alert %s: summary", r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["description"]), "alert %s: description", r.Alert)
			require.Regexp(t, "(`causet |`temporal |/readyz|`pg_isready)", r.Annotations["description"],
				"alert %s: the description names a command to run", r.Alert)
			runbook := r.Annotations["runbook"]
			anchor, ok := strings.CutPrefix(runbook, "deployments/observability/README.md#")
			require.True(t, ok, "alert %s: runbook %q points into README.md", r.Alert, runbook)
			require.Equal(t, strings.ToLower(r.Alert), anchor, "alert %s: runbook anchor", r.Alert)
			require.True(t, anchors[anchor], "alert %s: README.md has no section %q", r.Alert, anchor)
		}
	}
	t.Logf("%d alerts in %d groups", n, len(groups.Groups))

	// Every area the alerts are for has at least one.
	for _, metric := range []string{
		"causet_projection_retries_total", "causet_projection_dead_letters_published_total",
		"causet_projection_dead_letter_oldest_age_seconds", "causet_bridge_partition_lag",
		"causet_bridge_outage_pauses_total", "causet_bridge_blocked_keys", "causet_relay_lag_seconds",
		"causet_relay_lag_events", "causet_dedupe_ledger_maintenance_failures_total",
		"causet_dedupe_ledger_bytes", "causet_payload_decrypt_failures_total",
	} {
		found := false
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				found = found || strings.Contains(r.Expr, metric)
			}
		}
		require.True(t, found, "no alert reads %s", metric)
	}
}

// markdownAnchors are the GitHub anchors of README.md's headings.
func markdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	strip := regexp.MustCompile("[^a-z0-9 _-]")
	for _, line := range strings.Split(md, "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		a := strip.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}

// TestDashboard checks the dashboard's shape: schema version, the
// datasource and projection variables, every panel on the datasource
// variable, unique panel IDs, and every query parseable PromQL once the
// variables are replaced.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	require.GreaterOrEqual(t, d.SchemaVersion, 39)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	ds, ok := vars["datasource"]
	require.True(t, ok, "a datasource variable")
	require.Equal(t, "datasource", ds.Type)
	var dsQuery string
	require.NoError(t, json.Unmarshal(ds.Query, &dsQuery))
	require.Equal(t, "prometheus", dsQuery)
	proj, ok := vars["projection"]
	require.True(t, ok, "a projection variable")
	require.Equal(t, "query", proj.Type)
	require.True(t, proj.IncludeAll && proj.Multi, "projection: All and several")
	require.Equal(t, &datasourceRef{Type: "prometheus", UID: "${datasource}"}, proj.Datasource)

	ids := map[int]string{}
	queries, usesProjection, nested := 0, 0, 0
	for _, p := range d.Panels {
		nested += len(p.Panels)
	}
	require.Positive(t, nested, "a collapsed row holds panels (and the walk reaches them)")
	for _, p := range allPanels(d.Panels) {
		require.NotContains(t, ids, p.ID, "panel %q: ID %d taken by %q", p.Title, p.ID, ids[p.ID])
		ids[p.ID] = p.Title
		require.NotEmpty(t, p.Title, "panel %d", p.ID)
		if p.Type == "row" {
			require.Empty(t, p.Targets, "row %q", p.Title)
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		require.Equal(t, &datasourceRef{Type: "prometheus", UID: "${datasource}"}, p.Datasource, "panel %q", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			require.Equal(t, p.Datasource, tg.Datasource, "panel %q %s", p.Title, tg.RefID)
			expr, err := toPromQL(tg.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			_, err = promql().ParseExpr(expr)
			require.NoError(t, err, "panel %q %s: %s", p.Title, tg.RefID, expr)
			queries++
			if strings.Contains(tg.Expr, `projection=~"$projection"`) {
				usesProjection++
			}
		}
	}
	require.Positive(t, usesProjection, "panels filter by $projection")
	t.Logf("%d panels, %d queries (%d filtered by projection)", len(ids), queries, usesProjection)

	// The areas the dashboard is for.
	s := wantedMetrics(t)
	for _, metric := range []string{
		"causet_bridge_applied_total", "causet_projection_retries_total",
		"causet_projection_dead_letters_published_total", "causet_projection_dead_letter_oldest_age_seconds",
		"causet_bridge_partition_lag", "causet_bridge_outage_pauses_total", "causet_bridge_blocked_keys",
		"causet_bridge_parked_events_total", "causet_bridge_parked_oldest_seconds", "causet_relay_lag_events", "causet_relay_lag_seconds",
		"causet_dedupe_ledger_bytes", "temporal_activity_schedule_to_start_latency_seconds_sum",
		"temporal_workflow_task_schedule_to_start_latency_seconds_sum",
	} {
		require.Contains(t, s.names, metric)
	}
}

// TestToPromQL: Grafana's variable syntaxes are replaced, unknown ones refused.
func TestToPromQL(t *testing.T) {
	got, err := toPromQL(`sum(rate(x{projection=~"${projection}", p=~"$projection", q=~"[[projection]]", r=~"${projection:regex}"}[$__rate_interval])) + rate(y[$__interval])`)
	require.NoError(t, err)
	require.Equal(t, `sum(rate(x{projection=~".*", p=~".*", q=~".*", r=~".*"}[5m])) + rate(y[1m])`, got)
	_, err = toPromQL(`rate(x{projection=~"$projecton"}[5m])`)
	require.ErrorContains(t, err, "projecton")
	s := newSelectors()
	s.add(t, "test", `sum(rate({__name__="a_total"}[5m])) / ignoring(x) b + count({__name__=~"c_.+"})`)
	require.Equal(t, []string{"a_total", "b"}, slices.Sorted(maps.Keys(s.names)))
	require.Len(t, s.patterns, 1)
}
