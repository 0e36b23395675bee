package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// prometheusBin is the Prometheus of make test (TOOLGATE_PROMETHEUS, from
// scripts/prometheus.sh), else the one on PATH.
func prometheusBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOOLGATE_PROMETHEUS"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is required: run scripts/prometheus.sh, or make test: %v", err)
	}
	return p
}

// promQuery is the result of an instant query: its series' values.
func promQuery(base, q string) ([]string, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", q, body.Error)
	}
	var vals []string
	for _, r := range body.Data.Result {
		vals = append(vals, fmt.Sprint(r.Value[1]))
	}
	return vals, nil
}

// TestDashboardAndAlertsOnPrometheus: a real Prometheus scrapes a gateway
// under load (REST, gRPC-transcoded and MCP calls, some failing) and
// loads the chart's alert rules; every query of every panel of the
// chart's Grafana dashboard then gives data — a series with a number —
// and every alert rule evaluates without error.
func TestDashboardAndAlertsOnPrometheus(t *testing.T) {
	root := repoRoot(t)
	gw := runGateway(t, nil, "--registry", toolSetsRegistry(t), "--allow-anonymous")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	alerts := filepath.Join(root, "deploy", "helm", "toolgate", "files", "alerts.yaml")
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: toolgate
    static_configs: [{targets: [%q]}]
`, alerts, gw.AdminAddr())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prometheusBin(t), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr, "--log.level=warn")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("prometheus:\n%s", out.String())
		}
	}()
	prom := "http://" + promAddr
	eventually.True(t, 60*time.Second, "Prometheus ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", out.String())
		default:
		}
		resp, err := http.Get(prom + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Load until the test ends: tool calls by REST and MCP, listings, and
	// calls that fail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	post := func(path, body string, hdr map[string]string) {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (w + i) % 4 {
				case 0:
					post("/v1/tools/echo:invoke", `{"arguments": {"mode": "user"}}`, nil)
				case 1:
					post("/v1/tools/echo:invoke", `{"arguments": {"mode": "fail", "type": "unavailable", "message": "down"}}`, nil)
				case 2:
					post("/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"user"}}}`, nil)
				case 3:
					post("/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`, nil)
				}
			}
		})
	}

	raw, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "toolgate", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			q := strings.ReplaceAll(target.Expr, "$__rate_interval", "15s")
			var last []string
			var lastErr error
			eventually.True(t, 60*time.Second, fmt.Sprintf("panel %q, %q: data", p.Title, target.LegendFormat), func() bool {
				last, lastErr = promQuery(prom, q)
				for _, v := range last {
					if v != "NaN" {
						return true
					}
				}
				return false
			})
			if lastErr != nil {
				t.Errorf("panel %q: %v", p.Title, lastErr)
			}
		}
	}

	// Every alert rule loaded and evaluated without error.
	eventually.True(t, 30*time.Second, "the alert rules evaluated", func() bool {
		resp, err := http.Get(prom + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, Health, LastError string
						LastEvaluation          time.Time
					}
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false
		}
		n := 0
		for _, g := range body.Data.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s: %s", r.Name, r.LastError)
				}
				if r.Health == "ok" && !r.LastEvaluation.IsZero() {
					n++
				}
			}
		}
		return n == 3
	})
	// With the broker connected, the broker alert's expression is empty.
	if v, err := promQuery(prom, "toolgate_broker_connected == 0"); err != nil || len(v) != 0 {
		t.Errorf("toolgate_broker_connected == 0: %v, %v; want no series while connected", v, err)
	}
}
