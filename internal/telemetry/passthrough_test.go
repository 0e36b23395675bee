package telemetry_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/internal/telemetry"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// With tracing off, the caller's trace context still reaches the handler
// (and from there the request message), and a call without one gets none.
func TestTraceContextInterceptors(t *testing.T) {
	unary, _ := telemetry.TraceContextInterceptors()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		md    metadata.MD
		trace string
	}{
		{metadata.Pairs("traceparent", tp), "4bf92f3577b34da6a3ce929d0e0e4736"},
		{metadata.Pairs("Traceparent", tp), "4bf92f3577b34da6a3ce929d0e0e4736"},
		{metadata.Pairs("x-other", "1"), ""},
		{nil, ""},
	} {
		ctx := t.Context()
		if c.md != nil {
			ctx = metadata.NewIncomingContext(ctx, c.md)
		}
		var got string
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(ctx context.Context, _ any) (any, error) {
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				got = sc.TraceID().String()
			}
			return nil, nil
		})
		if err != nil || got != c.trace {
			t.Errorf("metadata %v: handler saw trace %q (err %v), want %q", c.md, got, err, c.trace)
		}
	}
}
