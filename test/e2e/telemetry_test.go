package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestTraceparentReachesService: the W3C trace context of a call is written
// into the Pulsar message the tool service receives, on both transports.
func TestTraceparentReachesService(t *testing.T) {
	t.Parallel()
	incoming := "00-" + callerTrace + "-00f067aa0ba902b7-01"
	args, _ := structpb.NewStruct(map[string]any{"mode": "property", "name": "traceparent"})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", incoming)
	r, err := env.grpc.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(r.GetOutput(), "-")
	if len(parts) != 4 || parts[1] != callerTrace {
		t.Fatalf("gRPC: the service saw traceparent %q, want one in trace %s", r.GetOutput(), callerTrace)
	}

	req, _ := http.NewRequest(http.MethodPost, env.httpBase+"/v1/tools/echo:invoke", strings.NewReader(`{"arguments": {"mode": "property", "name": "traceparent"}}`))
	req.Header.Set("traceparent", incoming)
	req.Header.Set("X-Request-Id", "req-e2e-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), callerTrace) {
		t.Fatalf("REST: %s; want the service to see trace %s", body, callerTrace)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-e2e-1" {
		t.Fatalf("X-Request-Id answered %q, want req-e2e-1", got)
	}
}

// TestTraceparentFromMCPMeta: an MCP request's trace context in
// params._meta (traceparent, tracestate) reaches the request message the
// tool service receives, as the HTTP header does, in both protocol eras;
// _meta wins over the header.
func TestTraceparentFromMCPMeta(t *testing.T) {
	t.Parallel()
	metaTrace := "0af7651916cd43dd8448eb211c80319c"
	for _, era := range []struct{ version, meta, name string }{
		{"2025-11-25", "", ""},
		{"2026-07-28", `,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`, "echo"},
	} {
		for _, prop := range []string{"traceparent", "tracestate"} {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"property","name":"` + prop + `"},` +
				`"_meta":{"traceparent":"00-` + metaTrace + `-00f067aa0ba902b7-01","tracestate":"vendor=meta"` + era.meta + `}}}`
			req, _ := http.NewRequest(http.MethodPost, env.httpBase+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", era.version)
			req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
			if era.name != "" {
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", era.name)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := metaTrace
			if prop == "tracestate" {
				want = "vendor=meta"
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("MCP %s: the service saw %s in %s; want %s", era.version, prop, out, want)
			}
		}
	}
}

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	if _, err := invokeEcho(t, map[string]any{"msg": "count me"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(env.adminBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`toolgate_calls_total{code="OK",method="/toolgate.v1.ToolService/InvokeTool",tool="echo"}`,
		`toolgate_call_duration_seconds_bucket{method="/toolgate.v1.ToolService/InvokeTool",tool="echo"`,
		"toolgate_bridge_pending", "toolgate_bridge_orphan_replies_total", "toolgate_bridge_publish_errors_total",
		"toolgate_registry_version", "toolgate_registry_reload_failures_total",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestOperationalEndpointsApart: the public listener answers health and
// readiness status only; metrics, readiness details and the Go profiles
// are the admin listener's.
func TestOperationalEndpointsApart(t *testing.T) {
	t.Parallel()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		if code, body := get(env.httpBase + path); code != http.StatusNotFound {
			t.Errorf("public %s: %d %.200s; want 404", path, code, body)
		}
	}
	if code, body := get(env.httpBase + "/readyz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ready"}` {
		t.Errorf("public /readyz: %d %s; want 200 and the status alone", code, body)
	}
	if code, body := get(env.httpBase + "/healthz"); code != http.StatusOK {
		t.Errorf("public /healthz: %d %s", code, body)
	}

	if code, body := get(env.adminBase + "/metrics"); code != http.StatusOK || !strings.Contains(body, "toolgate_bridge_pending") {
		t.Errorf("admin /metrics: %d %.200s; want the metrics", code, body)
	}
	if code, body := get(env.adminBase + "/readyz"); code != http.StatusOK || !strings.Contains(body, `"registry_version"`) || !strings.Contains(body, `"reply_topic"`) {
		t.Errorf("admin /readyz: %d %s; want the details", code, body)
	}
	if code, body := get(env.adminBase + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("admin /debug/pprof/goroutine: %d %.200s", code, body)
	}
	if code, _ := get(env.adminBase + "/v1/tools"); code != http.StatusNotFound {
		t.Errorf("admin /v1/tools: %d; the admin listener serves no calls", code)
	}
}
