package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/toolgate/toolgate/internal/toolcall"
)

const (
	mInvoke = toolcall.MethodInvoke
	mStream = toolcall.MethodStream
	mList   = toolcall.MethodListTools
)

var knownTools = []string{"echo", "fail", "bad", "cancelled", "block"}

func isKnown(tool string) bool { return slices.Contains(knownTools, tool) }

// metricsChain is the stub behind the metrics middleware.
func metricsChain(m *Metrics, stub *stubService) toolcall.Handler {
	return toolcall.Chain(stub.handle, m.Middleware())
}

// histCount is the number of observations of the duration histogram.
func histCount(t *testing.T, m *Metrics, method, tool string) uint64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "toolgate_call_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["tool"] == tool {
				return mt.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// labelValues is every label value of every series in m's registry.
func labelValues(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				out[l.GetValue()] = true
			}
		}
	}
	return out
}

func TestCallMetrics(t *testing.T) {
	t.Parallel()
	type series struct{ method, tool, code string }
	tests := []struct {
		name string
		call *toolcall.Call
		want series
	}{
		{"invoke ok", invokeCall("echo", nil), series{mInvoke, "echo", "OK"}},
		{"invoke service failure", invokeCall("fail", nil), series{mInvoke, "fail", "Unavailable"}},
		{"invoke bad arguments", invokeCall("bad", nil), series{mInvoke, "bad", "InvalidArgument"}},
		{"invoke bare context error", invokeCall("cancelled", nil), series{mInvoke, "cancelled", "Canceled"}},
		{"invoke unknown tool", invokeCall("no-such-tool", nil), series{mInvoke, UnknownTool, "NotFound"}},
		{"stream ok", streamCall("echo", nil), series{mStream, "echo", "OK"}},
		{"stream unknown tool", streamCall("no-such-tool", nil), series{mStream, UnknownTool, "NotFound"}},
		{"method without a tool", &toolcall.Call{Op: toolcall.OpListTools, Header: toolcall.NoHeader}, series{mList, "", "Unimplemented"}},
		// GetToolService's name is a service id, never a tool label.
		{"service id is no tool", &toolcall.Call{Op: toolcall.OpGetService, Name: "echo", Header: toolcall.NoHeader},
			series{toolcall.MethodGetService, "", "Unimplemented"}},
		{"get tool", &toolcall.Call{Op: toolcall.OpGetTool, Name: "echo", Header: toolcall.NoHeader},
			series{toolcall.MethodGetTool, "echo", "Unimplemented"}},
		// A door that names its calls (MCP) is counted under its name.
		{"door's method name", &toolcall.Call{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "echo", Header: toolcall.NoHeader},
			series{"mcp/InvokeTool", "echo", "OK"}},
		{"door's method name, unknown tool", &toolcall.Call{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "no-such-tool", Header: toolcall.NoHeader},
			series{"mcp/InvokeTool", UnknownTool, "NotFound"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
			_, _, _ = serve(t.Context(), metricsChain(m, newStub()), tt.call)

			if got := testutil.ToFloat64(m.calls.WithLabelValues(tt.want.method, tt.want.tool, tt.want.code)); got != 1 {
				t.Errorf("toolgate_calls_total%v = %v, want 1", tt.want, got)
			}
			if n := testutil.CollectAndCount(m.calls); n != 1 {
				t.Errorf("%d call series, want 1", n)
			}
			if n := histCount(t, m, tt.want.method, tt.want.tool); n != 1 {
				t.Errorf("duration observations = %d, want 1", n)
			}
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.want.method, tt.want.tool)); got != 0 {
				t.Errorf("in flight after the call = %v, want 0", got)
			}
			// A caller's tool name never becomes a label value.
			if v := labelValues(t, m); v["no-such-tool"] {
				t.Errorf("an unknown tool name became a label value: %v", v)
			}
		})
	}
}

// Calls by the gRPC method name and by a door's own name (MCP) are
// counted apart, and logged under the same names.
func TestDoorMethodNames(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, nil)))
	h := toolcall.Chain(newStub().handle, cl.Middleware(), m.Middleware())
	for _, c := range []*toolcall.Call{
		{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "echo", Header: toolcall.NoHeader},
		{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "echo", Header: toolcall.NoHeader},
		{Op: toolcall.OpListTools, Method: "mcp/ListTools", Header: toolcall.NoHeader},
		{Op: toolcall.OpInvoke, Name: "echo", Header: toolcall.NoHeader},
	} {
		_, _, _ = serve(t.Context(), h, c)
	}
	for _, c := range []struct {
		method, tool, code string
		want               float64
	}{{"mcp/InvokeTool", "echo", "OK", 2}, {"mcp/ListTools", "", "Unimplemented", 1}, {mInvoke, "echo", "OK", 1}} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(c.method, c.tool, c.code)); got != c.want {
			t.Errorf("calls{method=%q,tool=%q} = %v, want %v", c.method, c.tool, got, c.want)
		}
	}
	// MCP requests, and they alone, in mcp.server.operation.duration.
	if n := testutil.CollectAndCount(m.mcpDuration); n != 2 {
		t.Errorf("mcp_server_operation_duration_seconds has %d series, want 2 (tools/call echo, tools/list)", n)
	}
	for _, c := range []struct {
		labels []string
		count  uint64
	}{{[]string{"tools/call", "echo", "execute_tool", ""}, 2}, {[]string{"tools/list", "", "", "Unimplemented"}, 1}} {
		obs, err := m.mcpDuration.GetMetricWithLabelValues(c.labels...)
		if err != nil {
			t.Fatal(err)
		}
		var pb dto.Metric
		if err := obs.(prometheus.Histogram).Write(&pb); err != nil {
			t.Fatal(err)
		}
		if got := pb.GetHistogram().GetSampleCount(); got != c.count {
			t.Errorf("mcp_server_operation_duration_seconds%v: %d observations, want %d", c.labels, got, c.count)
		}
	}
	var methods []string
	for _, l := range buf.lines(t) {
		methods = append(methods, l["method"].(string))
	}
	if want := []string{"mcp/InvokeTool", "mcp/InvokeTool", "mcp/ListTools", mInvoke}; !slices.Equal(methods, want) {
		t.Errorf("logged methods %v, want %v", methods, want)
	}
}

func TestToolLabelWithoutKnownTools(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithoutRuntimeMetrics())
	for name, want := range map[string]string{"": "", "echo": UnknownTool, "anything": UnknownTool} {
		if got := m.toolLabel(name); got != want {
			t.Errorf("toolLabel(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestCallsInFlight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		call   func() *toolcall.Call
	}{
		{"unary", mInvoke, func() *toolcall.Call { return invokeCall("block", nil) }},
		{"stream", mStream, func() *toolcall.Call { return streamCall("block", nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
			stub := newStub()
			h := metricsChain(m, stub)
			errc := make(chan error, 1)
			go func() { _, _, err := serve(t.Context(), h, tt.call()); errc <- err }()
			select {
			case <-stub.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the call never reached the handler")
			}
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.method, "block")); got != 1 {
				t.Errorf("in flight{tool=block} = %v, want 1", got)
			}
			// The door names the tool before the chain runs: a call is
			// never in flight under tool="".
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.method, "")); got != 0 {
				t.Errorf("in flight{tool=\"\"} = %v, want 0", got)
			}
			close(stub.release)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.method, "block")); got != 0 {
				t.Errorf("in flight after the call = %v, want 0", got)
			}
		})
	}
}

func TestBridgeAndRegistryMetrics(t *testing.T) {
	t.Parallel()
	bs := BridgeStats{Pending: 3, Published: 10, PublishErrors: 1, Replies: 12, OrphanReplies: 2, BadReplies: 4, Resends: 6}
	rs := RegistryStats{Version: 7, Tools: 5, ReloadFailures: 2}
	m := NewMetrics(WithoutRuntimeMetrics(),
		WithBridgeStats(func() BridgeStats { return bs }),
		WithRegistryStats(func() RegistryStats { return rs }))
	want := `
# HELP toolgate_bridge_bad_replies_total Replies that could not be decoded.
# TYPE toolgate_bridge_bad_replies_total counter
toolgate_bridge_bad_replies_total 4
# HELP toolgate_bridge_orphan_replies_total Replies for no waiting call (late, cancelled, or another instance's).
# TYPE toolgate_bridge_orphan_replies_total counter
toolgate_bridge_orphan_replies_total 2
# HELP toolgate_bridge_pending Calls waiting for replies from tool services.
# TYPE toolgate_bridge_pending gauge
toolgate_bridge_pending 3
# HELP toolgate_bridge_publish_errors_total Requests the broker did not take.
# TYPE toolgate_bridge_publish_errors_total counter
toolgate_bridge_publish_errors_total 1
# HELP toolgate_bridge_published_total Requests published to tool services.
# TYPE toolgate_bridge_published_total counter
toolgate_bridge_published_total 10
# HELP toolgate_bridge_replies_total Reply chunks delivered to a waiting call.
# TYPE toolgate_bridge_replies_total counter
toolgate_bridge_replies_total 12
# HELP toolgate_bridge_resends_total Calls whose tool services were asked for their last reply again: this gateway's consumer of the topic it went to had connected again (the topic moved to another broker).
# TYPE toolgate_bridge_resends_total counter
toolgate_bridge_resends_total 6
# HELP toolgate_registry_reload_failures_total Registry reloads that failed (the previous snapshot stayed in use).
# TYPE toolgate_registry_reload_failures_total counter
toolgate_registry_reload_failures_total 2
# HELP toolgate_registry_tools Tools in the registry snapshot in use.
# TYPE toolgate_registry_tools gauge
toolgate_registry_tools 5
# HELP toolgate_registry_version Version of the registry snapshot in use (counts loads from 1).
# TYPE toolgate_registry_version gauge
toolgate_registry_version 7
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"toolgate_bridge_pending", "toolgate_bridge_published_total", "toolgate_bridge_publish_errors_total",
		"toolgate_bridge_replies_total", "toolgate_bridge_orphan_replies_total", "toolgate_bridge_bad_replies_total",
		"toolgate_bridge_resends_total", "toolgate_registry_version", "toolgate_registry_tools", "toolgate_registry_reload_failures_total"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestRegistrySourceMetrics(t *testing.T) {
	t.Parallel()
	rs := RegistryStats{Version: 3, Tools: 4, Conflicts: 1, Sources: []RegistrySourceStats{
		{Source: "file", Up: true, Rejected: 2, Units: 1},
		{Source: "announcement", Up: false, Rejected: 0, Units: 3},
	}}
	m := NewMetrics(WithoutRuntimeMetrics(), WithRegistryStats(func() RegistryStats { return rs }))
	want := `
# HELP toolgate_registry_conflicts Tool names and service ids defined by more than one registry source (the higher-precedence one is served).
# TYPE toolgate_registry_conflicts gauge
toolgate_registry_conflicts 1
# HELP toolgate_registry_rejected_total Registry updates refused as invalid, by source (for the config service: invalid descriptors); what was there stayed.
# TYPE toolgate_registry_rejected_total counter
toolgate_registry_rejected_total{source="announcement"} 0
toolgate_registry_rejected_total{source="file"} 2
# HELP toolgate_registry_source_up 1 when a registry source reaches what it reads, by source.
# TYPE toolgate_registry_source_up gauge
toolgate_registry_source_up{source="announcement"} 0
toolgate_registry_source_up{source="file"} 1
# HELP toolgate_registry_source_units Units merged from each registry source (announcing services, for announcements).
# TYPE toolgate_registry_source_units gauge
toolgate_registry_source_units{source="announcement"} 3
toolgate_registry_source_units{source="file"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "toolgate_registry_conflicts",
		"toolgate_registry_rejected_total", "toolgate_registry_source_up", "toolgate_registry_source_units"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsHandler(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithKnownTools(isKnown))
	if _, _, err := serve(t.Context(), metricsChain(m, newStub()), invokeCall("echo", nil)); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	hs := httptest.NewServer(m.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, want := range []string{
		`toolgate_calls_total{code="OK",method="/toolgate.v1.ToolService/InvokeTool",tool="echo"} 1`,
		`toolgate_call_duration_seconds_bucket{method="/toolgate.v1.ToolService/InvokeTool",tool="echo",le="0.0005"}`,
		`toolgate_call_duration_seconds_bucket{method="/toolgate.v1.ToolService/InvokeTool",tool="echo",le="60"} 1`,
		`toolgate_calls_in_flight{method="/toolgate.v1.ToolService/InvokeTool",tool="echo"} 0`,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// BenchmarkMiddleware measures what the metrics and call log middleware
// add to a call, as a door runs it: a new Call per request.
func BenchmarkMiddleware(b *testing.B) {
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	cl := NewCallLog(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	quiet := NewCallLog(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
	handler := func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{}, nil
	}
	hdr := header("User", "alice")
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		mws  []toolcall.Middleware
	}{
		{"metrics", []toolcall.Middleware{m.Middleware()}},
		{"log+metrics", []toolcall.Middleware{cl.Middleware(), m.Middleware()}},
		// The call log on, its lines not written (as at --log-level warn).
		{"log(warn)+metrics", []toolcall.Middleware{quiet.Middleware(), m.Middleware()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			h := toolcall.Chain(handler, bc.mws...)
			for b.Loop() {
				c := &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Header: hdr}
				_, _ = h(ctx, c, nil)
			}
		})
	}
}

// Repeated calls reuse the cached series and count every call.
func TestCallMetricsRepeated(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	h := metricsChain(m, newStub())
	for range 3 {
		_, _, _ = serve(t.Context(), h, invokeCall("echo", nil))
		_, _, _ = serve(t.Context(), h, invokeCall("fail", nil))
	}
	for _, c := range []struct{ tool, code string }{{"echo", "OK"}, {"fail", "Unavailable"}} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(mInvoke, c.tool, c.code)); got != 3 {
			t.Errorf("toolgate_calls_total{%s,%s} = %v, want 3", c.tool, c.code, got)
		}
		if n := histCount(t, m, mInvoke, c.tool); n != 3 {
			t.Errorf("%s: duration observations = %d, want 3", c.tool, n)
		}
	}
	if n := testutil.CollectAndCount(m.calls); n != 2 {
		t.Errorf("%d call series, want 2", n)
	}
}

// Calls from many goroutines at once are all counted (run with -race).
func TestCallMetricsConcurrent(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	h := metricsChain(m, newStub())
	const workers, each = 8, 50
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range each {
				_, _, _ = serve(context.Background(), h, invokeCall("echo", nil))
				_, _, _ = serve(context.Background(), h, streamCall("fail", nil))
			}
		}()
	}
	for range workers {
		<-done
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(mInvoke, "echo", "OK")); got != workers*each {
		t.Errorf("invoke calls = %v, want %d", got, workers*each)
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(mStream, "fail", "Unavailable")); got != workers*each {
		t.Errorf("stream calls = %v, want %d", got, workers*each)
	}
	for _, method := range []string{mInvoke, mStream} {
		for _, tool := range []string{"echo", "fail"} {
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(method, tool)); got != 0 {
				t.Errorf("in flight{%s,%s} = %v, want 0", method, tool, got)
			}
		}
	}
}
