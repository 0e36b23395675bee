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

	"github.com/prometheus/client_golang/prometheus/testutil"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

const (
	mInvoke = "/toolgate.v1.ToolService/InvokeTool"
	mStream = "/toolgate.v1.ToolService/StreamTool"
	mList   = "/toolgate.v1.ToolService/ListTools"
)

var knownTools = []string{"echo", "fail", "bad", "cancelled", "block"}

func isKnown(tool string) bool { return slices.Contains(knownTools, tool) }

func metricsServer(t *testing.T, m *Metrics, stub *stubService) *grpc.ClientConn {
	return startServer(t, stub,
		grpc.ChainUnaryInterceptor(m.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.StreamServerInterceptor()))
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
		call func(ctx context.Context, conn *grpc.ClientConn) error
		want series
	}{
		{"invoke ok", func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "echo") }, series{mInvoke, "echo", "OK"}},
		{"invoke service failure", func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "fail") }, series{mInvoke, "fail", "Unavailable"}},
		{"invoke bad arguments", func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "bad") }, series{mInvoke, "bad", "InvalidArgument"}},
		{"invoke bare context error", func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "cancelled") }, series{mInvoke, "cancelled", "Canceled"}},
		{"invoke unknown tool", func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "no-such-tool") }, series{mInvoke, UnknownTool, "NotFound"}},
		{"stream ok", func(ctx context.Context, c *grpc.ClientConn) error { _, err := stream(ctx, c, "echo"); return err }, series{mStream, "echo", "OK"}},
		{"stream unknown tool", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := stream(ctx, c, "no-such-tool")
			return err
		}, series{mStream, UnknownTool, "NotFound"}},
		{"method without a tool", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := toolgatev1.NewToolServiceClient(c).ListTools(ctx, &toolgatev1.ListToolsRequest{})
			return err
		}, series{mList, "", "Unimplemented"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
			conn := metricsServer(t, m, newStub())
			_ = tt.call(t.Context(), conn)

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
		call   func(ctx context.Context, c *grpc.ClientConn) error
	}{
		{"unary", mInvoke, func(ctx context.Context, c *grpc.ClientConn) error { return invoke(ctx, c, "block") }},
		{"stream", mStream, func(ctx context.Context, c *grpc.ClientConn) error { _, err := stream(ctx, c, "block"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
			stub := newStub()
			conn := metricsServer(t, m, stub)
			errc := make(chan error, 1)
			go func() { errc <- tt.call(t.Context(), conn) }()
			select {
			case <-stub.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the call never reached the handler")
			}
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.method, "block")); got != 1 {
				t.Errorf("in flight{tool=block} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.inFlight.WithLabelValues(tt.method, "")); got != 0 {
				t.Errorf("in flight{tool=\"\"} = %v, want 0 once the tool is known", got)
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
	bs := BridgeStats{Pending: 3, Published: 10, PublishErrors: 1, Replies: 12, OrphanReplies: 2, BadReplies: 4}
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
		"toolgate_registry_version", "toolgate_registry_tools", "toolgate_registry_reload_failures_total"); err != nil {
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
	conn := metricsServer(t, m, newStub())
	if err := invoke(t.Context(), conn, "echo"); err != nil {
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

// BenchmarkInterceptors measures what the metrics and call log
// interceptors add to a unary call, without the network.
func BenchmarkInterceptors(b *testing.B) {
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	cl := NewCallLog(slog.New(slog.NewJSONHandler(io.Discard, nil)), WithUser(fakeUser))
	quiet := NewCallLog(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})), WithUser(fakeUser))
	chain := []grpc.UnaryServerInterceptor{cl.UnaryServerInterceptor(), m.UnaryServerInterceptor()}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: mInvoke}
	req := &toolgatev1.InvokeToolRequest{Name: "echo"}
	// A stream to take the x-request-id header, as gRPC and the REST
	// front door give every call.
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), headerSink{})
	for _, bc := range []struct {
		name string
		n    int
	}{{"metrics", 1}, {"log+metrics", 2}, {"log(warn)+metrics", 3}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			ics := chain[2-min(bc.n, 2):]
			if bc.n == 3 { // the call log on, its lines not written (as at --log-level warn)
				ics = []grpc.UnaryServerInterceptor{quiet.UnaryServerInterceptor(), chain[1]}
			}
			for b.Loop() {
				h := handler
				for i := len(ics) - 1; i >= 0; i-- {
					ic, next := ics[i], h
					h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
				}
				_, _ = h(ctx, req)
			}
		})
	}
}

// headerSink is a grpc.ServerTransportStream that drops what it is given.
type headerSink struct{}

func (headerSink) Method() string               { return mInvoke }
func (headerSink) SetHeader(metadata.MD) error  { return nil }
func (headerSink) SendHeader(metadata.MD) error { return nil }
func (headerSink) SetTrailer(metadata.MD) error { return nil }

// Repeated calls reuse the cached series and count every call.
func TestCallMetricsRepeated(t *testing.T) {
	t.Parallel()
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	conn := metricsServer(t, m, newStub())
	for range 3 {
		_ = invoke(t.Context(), conn, "echo")
		_ = invoke(t.Context(), conn, "fail")
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
