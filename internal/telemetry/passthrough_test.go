package telemetry_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel/trace"
)

// metadata is a call's Header as gRPC metadata holds it: lower-case names.
type metadata map[string][]string

func (md metadata) Values(key string) []string { return md[key] }

// With tracing off, the caller's trace context still reaches the handler
// (and from there the request message), and a call without one gets none.
func TestTraceContextMiddleware(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	httpHeader := func(k, v string) toolcall.Header {
		h := http.Header{}
		h.Set(k, v)
		return httpcall.Header(h)
	}
	for _, c := range []struct {
		name  string
		h     toolcall.Header
		trace string
	}{
		{"gRPC metadata", metadata{"traceparent": {tp}}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"HTTP header", httpHeader("Traceparent", tp), "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"HTTP header in lower case", httpHeader("traceparent", tp), "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"bad traceparent", metadata{"traceparent": {"00-nonsense"}}, ""},
		{"other metadata", metadata{"x-other": {"1"}}, ""},
		{"other header", httpHeader("X-Other", "1"), ""},
		{"no header", toolcall.NoHeader, ""},
	} {
		var got string
		h := toolcall.Chain(func(ctx context.Context, _ *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				got = sc.TraceID().String()
			}
			return toolcall.Result{}, nil
		}, telemetry.TraceContextMiddleware())
		_, err := h(t.Context(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Header: c.h}, nil)
		if err != nil || got != c.trace {
			t.Errorf("%s: handler saw trace %q (err %v), want %q", c.name, got, err, c.trace)
		}
	}
}
