package telemetry

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// BenchmarkMetricsMiddleware is the metrics middleware's cost per call:
// in-flight gauge, call counter and duration histogram.
func BenchmarkMetricsMiddleware(b *testing.B) {
	m := NewMetrics(WithKnownTools(func(string) bool { return true }), WithoutRuntimeMetrics())
	h := toolcall.Chain(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{}, nil
	}, m.Middleware())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Header: toolcall.NoHeader}
		for pb.Next() {
			_, _ = h(ctx, c, nil)
		}
	})
}
