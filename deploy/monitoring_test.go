package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	alertsFile    = chart + "/files/alerts.yaml"
	dashboardFile = chart + "/files/dashboard.json"
)

// promtool is the promtool of make test (TOOLGATE_PROMTOOL, from
// scripts/prometheus.sh), else the one on PATH; a test that needs it and
// cannot have it fails.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOOLGATE_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is required: run scripts/prometheus.sh, or make test: %v", err)
	}
	return p
}

// TestAlertRules: promtool accepts the alerts, as the file holds them and
// as the chart's PrometheusRule renders them, and the alerts named in
// the docs are there.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	out, err := exec.Command(bin, "check", "rules", alertsFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
	var file struct {
		Groups []struct {
			Rules []struct{ Alert string }
		}
	}
	readYAML(t, alertsFile, &file)
	var names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	if got := strings.Join(names, ","); got != "ToolgateErrorRatioHigh,ToolgateBrokerDisconnected,ToolgateRepliesDropped" {
		t.Errorf("alerts %s", got)
	}

	rule := renderedKind(t, "PrometheusRule")
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(path, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the rendered PrometheusRule: %v\n%s", err, out)
	}
	var want map[string]any
	readYAML(t, alertsFile, &want)
	if !reflect.DeepEqual(normalize(t, rule["spec"]), normalize(t, want)) {
		t.Errorf("the PrometheusRule's spec is not files/alerts.yaml:\n%s", spec)
	}
}

// TestDashboard: the chart's ConfigMap holds files/dashboard.json as it
// is; every panel has a Prometheus query.
func TestDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard uid %q, %d panels", d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	cm := renderedKind(t, "ConfigMap", "dashboard")
	data, _ := cm["data"].(map[string]any)
	if got, _ := data["toolgate.json"].(string); got != string(raw) {
		t.Errorf("the dashboard ConfigMap does not hold files/dashboard.json")
	}
	labels, _ := cm["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\" for Grafana's sidecar", labels)
	}
}

// renderedKind is the one object of kind (whose name holds nameHas) the
// every-option values render.
func renderedKind(t *testing.T, kind string, nameHas ...string) map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(render(t, "-f", allValues)))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name, _ := m["metadata"].(map[string]any)["name"].(string)
		if m["kind"] == kind && (len(nameHas) == 0 || strings.Contains(name, nameHas[0])) {
			return m
		}
	}
	t.Fatalf("no %s rendered from %s", kind, allValues)
	return nil
}

// normalize is v as JSON sees it, so that YAML decodings compare.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
