package telemetry

import (
	"context"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
)

// BenchmarkMetricsInterceptor is the metrics interceptor's cost per unary
// call: in-flight gauge, call counter and duration histogram.
func BenchmarkMetricsInterceptor(b *testing.B) {
	m := NewMetrics(WithKnownTools(func(string) bool { return true }), WithoutRuntimeMetrics())
	ic := m.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: toolgatev1.ToolService_InvokeTool_FullMethodName}
	req := &toolgatev1.InvokeToolRequest{Name: "echo"}
	h := func(context.Context, any) (any, error) { return nil, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = ic(ctx, req, info, h)
		}
	})
}
