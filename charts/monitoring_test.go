package charts_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// ruleGroups is the part of a PrometheusRule that Prometheus reads as a rule
// file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// RenderRules renders the chart's PrometheusRule with args and returns its
// rule groups.
func renderRules(t *testing.T, args ...string) ruleGroups {
	t.Helper()
	for _, o := range render(t, append([]string{"--set", "prometheusRule.enabled=true"}, args...)...) {
		if o.Kind != "PrometheusRule" {
			continue
		}
		var pr struct {
			Spec ruleGroups `json:"spec"`
		}
		if err := yaml.Unmarshal(o.raw, &pr); err != nil {
			t.Fatal(err)
		}
		return pr.Spec
	}
	t.Fatal("the chart renders no PrometheusRule with prometheusRule.enabled=true")
	return ruleGroups{}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAlertRulesPassPromtool checks the chart's alerts with the real
// promtool: `check rules` (expressions, durations, annotation templates) and
// `test rules` against testdata/alerts_test.yaml, where every alert has a
// case that fires and one that must not. The unit tests match alert labels;
// annotations are left out of the copy they run on so that rewording a
// description does not mean rewriting the tests (check rules has parsed
// their templates).
func TestAlertRulesPassPromtool(t *testing.T) {
	rules := renderRules(t)
	dir := t.TempDir()
	full := filepath.Join(dir, "full.yaml")
	writeYAML(t, full, rules)
	if out, err := testenv.Promtool(t, dir, nil, "check", "rules", "--lint=all", "--lint-fatal", full); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	tested := map[string]bool{}
	for gi := range rules.Groups {
		for ri := range rules.Groups[gi].Rules {
			r := &rules.Groups[gi].Rules[ri]
			r.Annotations = nil
			tested[r.Alert] = false
		}
	}
	writeYAML(t, filepath.Join(dir, "rules.yaml"), rules)
	cases, err := os.ReadFile("testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), cases, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := testenv.Promtool(t, dir, nil, "test", "rules", "alerts_test.yaml")
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("promtool test rules:\n%s", out)

	// Every alert of the chart is tested, firing and not.
	var suite struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(cases, &suite); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for alert := range tested {
		if !fires[alert] || !silent[alert] {
			t.Errorf("alert %s: testdata/alerts_test.yaml has a firing case %v, a silent case %v; want both", alert, fires[alert], silent[alert])
		}
	}
}

// TestAlertRulesFollowValues checks that the selector, durations, threshold
// and extra labels come from the values.
func TestAlertRulesFollowValues(t *testing.T) {
	rules := renderRules(t,
		"--set", `prometheusRule.selector=cluster_set="blue"`,
		"--set", "prometheusRule.alerts.noLeader.for=7m",
		"--set-json", "prometheusRule.alerts.propagationSlow.thresholdSeconds=2.5",
		"--set", "prometheusRule.additionalAlertLabels.team=platform")
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !strings.Contains(r.Expr, `{cluster_set="blue"`) || strings.Contains(r.Expr, "job=") {
				t.Errorf("%s: expr %q does not use the selector", r.Alert, r.Expr)
			}
			if r.Labels["team"] != "platform" || r.Labels["severity"] == "" {
				t.Errorf("%s: labels %v, want severity and team=platform", r.Alert, r.Labels)
			}
			switch r.Alert {
			case "EndpointAggregatorNoLeader":
				if r.For != "7m" {
					t.Errorf("%s: for %q, want 7m", r.Alert, r.For)
				}
			case "EndpointAggregatorPropagationSlow":
				if !strings.HasSuffix(r.Expr, "> 2.5") {
					t.Errorf("%s: expr %q, want threshold 2.5", r.Alert, r.Expr)
				}
			}
		}
	}
	if n != 10 {
		t.Errorf("%d alerts rendered, want 10", n)
	}
}

// Dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardQueriesParse checks that the dashboard is valid JSON, that
// every panel has a query, and that promtool parses each query once
// Grafana's variables are expanded as Grafana would.
func TestDashboardQueriesParse(t *testing.T) {
	b, err := os.ReadFile("../config/dashboards/endpoint-aggregator.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			expr := strings.NewReplacer(`$job`, `.+`, `$__rate_interval`, `1m`).Replace(q.Expr)
			if out, err := testenv.Promtool(t, "", nil, "promql", "format", "--experimental", expr); err != nil {
				t.Errorf("panel %q: query %q: %v\n%s", p.Title, q.Expr, err, out)
			}
		}
	}
	if queries < 20 {
		t.Errorf("the dashboard has %d queries; did it lose panels?", queries)
	}
}

// TestChartShipsTheDashboard checks the ConfigMap carries the dashboard
// byte for byte with the sidecar's label.
func TestChartShipsTheDashboard(t *testing.T) {
	want, err := os.ReadFile("../config/dashboards/endpoint-aggregator.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range render(t) {
		if o.Kind == "ConfigMap" && strings.HasSuffix(o.Name, "-dashboards") {
			t.Fatalf("dashboards ConfigMap %s rendered with dashboards.enabled=false", o.Name)
		}
	}
	found := false
	for _, o := range render(t, "--set", "dashboards.enabled=true", "--set", "dashboards.annotations.grafana_folder=Multicluster") {
		if o.Kind != "ConfigMap" || o.Name != fullname+"-dashboards" {
			continue
		}
		found = true
		var cm struct {
			Metadata struct {
				Labels, Annotations map[string]string
			}
			Data map[string]string
		}
		if err := yaml.Unmarshal(o.raw, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Metadata.Labels["grafana_dashboard"] != "1" || cm.Metadata.Annotations["grafana_folder"] != "Multicluster" {
			t.Errorf("labels %v annotations %v, want grafana_dashboard=1 and the folder annotation", cm.Metadata.Labels, cm.Metadata.Annotations)
		}
		if got := cm.Data["endpoint-aggregator.json"]; got != strings.TrimSuffix(string(want), "\n") {
			t.Errorf("the ConfigMap's dashboard differs from config/dashboards/endpoint-aggregator.json")
		}
	}
	if !found {
		t.Fatal("no dashboards ConfigMap with dashboards.enabled=true")
	}
}
