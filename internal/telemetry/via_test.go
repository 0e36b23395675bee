package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
)

// TestViaMCP: a call whose context ViaMCP marked is counted and logged
// under "mcp/<Method>"; an unmarked one keeps the gRPC method name.
func TestViaMCP(t *testing.T) {
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	var buf bytes.Buffer
	cl := NewCallLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	chain := func(ctx context.Context, full string, req any) {
		info := &grpc.UnaryServerInfo{FullMethod: full}
		_, _ = cl.UnaryServerInterceptor()(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return m.UnaryServerInterceptor()(ctx, req, info, func(context.Context, any) (any, error) { return nil, nil })
		})
	}
	req := &toolgatev1.InvokeToolRequest{Name: "echo"}
	chain(ViaMCP(context.Background()), mInvoke, req)
	chain(ViaMCP(context.Background()), mInvoke, req)
	chain(ViaMCP(context.Background()), mList, &toolgatev1.ListToolsRequest{})
	chain(context.Background(), mInvoke, req)

	for _, c := range []struct {
		method, tool string
		want         float64
	}{{"mcp/InvokeTool", "echo", 2}, {"mcp/ListTools", "", 1}, {mInvoke, "echo", 1}} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(c.method, c.tool, "OK")); got != c.want {
			t.Errorf("calls{method=%q,tool=%q} = %v, want %v", c.method, c.tool, got, c.want)
		}
	}
	var methods []string
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var line struct{ Method string }
		if err := dec.Decode(&line); err != nil {
			t.Fatal(err)
		}
		methods = append(methods, line.Method)
	}
	want := []string{"mcp/InvokeTool", "mcp/InvokeTool", "mcp/ListTools", mInvoke}
	if len(methods) != len(want) {
		t.Fatalf("logged methods %v, want %v", methods, want)
	}
	for i := range want {
		if methods[i] != want[i] {
			t.Errorf("log line %d: method %q, want %q", i, methods[i], want[i])
		}
	}
}
