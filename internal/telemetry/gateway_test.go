package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/testutil"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// The REST side as the gateway wires it: grpc-gateway in front of a gRPC
// server with every piece of this package, in the order internal/app uses,
// and the header matchers that carry x-request-id and traceparent.
func TestThroughGRPCGateway(t *testing.T) {
	t.Parallel()
	tp, exp := inMemoryTracing(t)
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, nil)), WithUser(fakeUser))
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	var a fakeAuth
	conn := startServer(t, newStub(),
		spanUnary(tp), spanStream(tp),
		grpc.ChainUnaryInterceptor(cl.UnaryServerInterceptor(), m.UnaryServerInterceptor(), a.unary, cl.UnaryUserInterceptor()),
		grpc.ChainStreamInterceptor(cl.StreamServerInterceptor(), m.StreamServerInterceptor(), a.stream, cl.StreamUserInterceptor()))

	mux := runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			switch k := strings.ToLower(key); k {
			case RequestIDHeader, "traceparent", "tracestate", "user":
				return k, true
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		runtime.WithOutgoingHeaderMatcher(func(key string) (string, bool) {
			if key == RequestIDHeader {
				return "X-Request-Id", true
			}
			return runtime.MetadataHeaderPrefix + key, true
		}),
	)
	if err := toolgatev1.RegisterToolServiceHandler(context.Background(), mux, conn); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mux)
	defer hs.Close()

	tests := []struct {
		name, path, requestID, user string
		wantStatus                  int
		wantCode                    string
	}{
		{"invoke", "/v1/tools/echo:invoke", "rest-1", "alice", http.StatusOK, "OK"},
		{"stream", "/v1/tools/echo:stream", "rest-2", "alice", http.StatusOK, "OK"},
		{"refused", "/v1/tools/echo:invoke", "rest-3", "", http.StatusUnauthorized, "Unauthenticated"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+tt.path, strings.NewReader(`{"arguments": {"secret": "hunter2"}}`))
		req.Header.Set("X-Request-Id", tt.requestID)
		req.Header.Set("Traceparent", callerTraceparent)
		if tt.user != "" {
			req.Header.Set("User", tt.user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s: HTTP %d, want %d", tt.name, resp.StatusCode, tt.wantStatus)
		}
		if got := resp.Header.Get("X-Request-Id"); got != tt.requestID {
			t.Errorf("%s: X-Request-Id %q, want %q", tt.name, got, tt.requestID)
		}
	}

	lines := buf.lines(t)
	if len(lines) != len(tests) {
		t.Fatalf("want %d log lines, got:\n%s", len(tests), buf)
	}
	for i, tt := range tests {
		l := lines[i]
		if l["request_id"] != tt.requestID || l["user"] != tt.user || l["code"] != tt.wantCode || l["trace_id"] != callerTraceID {
			t.Errorf("%s: log line %v", tt.name, l)
		}
	}
	for _, s := range exp.GetSpans() {
		if s.SpanKind == trace.SpanKindServer && s.SpanContext.TraceID().String() != callerTraceID {
			t.Errorf("server span %q in trace %s, want the caller's", s.Name, s.SpanContext.TraceID())
		}
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(mInvoke, "echo", "Unauthenticated")); got != 1 {
		t.Errorf("refused calls counted %v, want 1", got)
	}
	if strings.Contains(buf.String(), "hunter2") {
		t.Error("arguments logged at Info")
	}
}
