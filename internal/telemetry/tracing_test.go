package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inMemoryTracing returns a tracer provider that records spans
// synchronously into the returned exporter.
func inMemoryTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func spanOfKind(t *testing.T, spans tracetest.SpanStubs, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.SpanKind == kind {
			return s
		}
	}
	t.Fatalf("no %v span among %d", kind, len(spans))
	return tracetest.SpanStub{}
}

const (
	callerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	callerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// The trace context written into the Pulsar properties belongs to the
// call's trace, and a service that extracts it starts spans in it.
func TestTraceparentJoinsTheServiceToTheTrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		traceparent string // sent by the caller; "" for none
		call        func(name string, h toolcall.Header) *toolcall.Call
	}{
		{"new trace", "", invokeCall},
		{"caller's trace", callerTraceparent, invokeCall},
		{"stream in the caller's trace", callerTraceparent, streamCall},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp, exp := inMemoryTracing(t)
			stub := newStub()
			var hdr toolcall.Header
			if tt.traceparent != "" {
				hdr = header("traceparent", tt.traceparent)
			}
			if _, _, err := serve(t.Context(), toolcall.Chain(stub.handle, SpanMiddleware(tp)), tt.call("publish", hdr)); err != nil {
				t.Fatal(err)
			}
			props := <-stub.props

			server := spanOfKind(t, exp.GetSpans(), trace.SpanKindServer)
			publish := spanOfKind(t, exp.GetSpans(), trace.SpanKindProducer)
			if tt.traceparent != "" && server.SpanContext.TraceID().String() != callerTraceID {
				t.Errorf("server span trace %s, want the caller's %s", server.SpanContext.TraceID(), callerTraceID)
			}
			if publish.Parent.SpanID() != server.SpanContext.SpanID() {
				t.Errorf("publish span's parent %s, want the server span %s", publish.Parent.SpanID(), server.SpanContext.SpanID())
			}
			if publish.Name != "send persistent://tg/request/publish" {
				t.Errorf("publish span name %q", publish.Name)
			}

			// What the bridge wrote into the message properties.
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
			if got.TraceID() != server.SpanContext.TraceID() {
				t.Errorf("traceparent %q carries trace %s, want the server span's %s", props["traceparent"], got.TraceID(), server.SpanContext.TraceID())
			}
			if props["baggage"] != "gen_ai.tool.name=publish" {
				t.Errorf("baggage %q, want the tool's name (gen_ai.tool.name=publish)", props["baggage"])
			}
			if props["id"] != "c0ffee" {
				t.Errorf("other properties changed: %v", props)
			}

			// The tool service's side.
			sctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)) // as the Go SDK does
			_, span := tp.Tracer("service").Start(sctx, "process", trace.WithSpanKind(trace.SpanKindConsumer))
			span.End()
			svc := spanOfKind(t, exp.GetSpans(), trace.SpanKindConsumer)
			if svc.SpanContext.TraceID() != server.SpanContext.TraceID() {
				t.Errorf("service span trace %s, want %s", svc.SpanContext.TraceID(), server.SpanContext.TraceID())
			}
			if svc.Parent.SpanID() != publish.SpanContext.SpanID() || !svc.Parent.IsRemote() {
				t.Errorf("service span's parent %v, want the remote publish span %s", svc.Parent, publish.SpanContext.SpanID())
			}
		})
	}
}

// With tracing off, nothing is recorded and nothing is invented; a trace
// context the caller sent still reaches the service.
func TestTracingOffPassesTheCallersTraceOn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		traceparent string
		wantTrace   string // "" for no traceparent property
		// trace is the chain's trace middleware: the gateway runs
		// TraceContextMiddleware when tracing is off; SpanMiddleware over
		// a provider that records nothing must pass the trace on too.
		trace toolcall.Middleware
	}{
		{"no trace context", "", "", TraceContextMiddleware()},
		{"caller's trace context", callerTraceparent, callerTraceID, TraceContextMiddleware()},
		{"spans off, no trace context", "", "", SpanMiddleware(noop.NewTracerProvider())},
		{"spans off, caller's trace context", callerTraceparent, callerTraceID, SpanMiddleware(noop.NewTracerProvider())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stub := newStub()
			var hdr toolcall.Header
			if tt.traceparent != "" {
				hdr = header("Traceparent", tt.traceparent)
			}
			if _, _, err := serve(t.Context(), toolcall.Chain(stub.handle, tt.trace), invokeCall("publish", hdr)); err != nil {
				t.Fatal(err)
			}
			props := <-stub.props
			if tt.wantTrace == "" {
				if len(props) != 1 {
					t.Errorf("properties %v, want only the id", props)
				}
				return
			}
			if tp := props["traceparent"]; !strings.Contains(tp, tt.wantTrace) {
				t.Errorf("traceparent %q, want trace %s", tp, tt.wantTrace)
			}
			// As the Go SDK reads it: a remote parent in the caller's trace.
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
			if sc.TraceID().String() != tt.wantTrace || !sc.IsRemote() {
				t.Errorf("the service sees span context %v, want the caller's trace %s", sc, tt.wantTrace)
			}
		})
	}
}

func TestInjectTraceparent(t *testing.T) {
	t.Parallel()
	tp, _ := inMemoryTracing(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	tests := []struct {
		name  string
		ctx   context.Context
		props map[string]string
		want  int
	}{
		{"no span", context.Background(), map[string]string{}, 0},
		{"span", ctx, map[string]string{}, 1},
		{"nil properties", ctx, nil, 0},
	}
	for _, tt := range tests {
		InjectTraceparent(tt.ctx, tt.props)
		if len(tt.props) != tt.want {
			t.Errorf("%s: properties %v, want %d entries", tt.name, tt.props, tt.want)
		}
	}
}

func TestStartPublishSpan(t *testing.T) {
	t.Parallel()
	tp, exp := inMemoryTracing(t)

	// No parent span: no span, and end is safe.
	ctx, end := StartPublishSpan(context.Background(), "topic")
	end(errors.New("ignored"))
	if trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("a publish span without a parent")
	}

	pctx, parent := tp.Tracer("t").Start(context.Background(), "call")
	_, end = StartPublishSpan(pctx, "persistent://tg/request/x")
	end(errors.New("broker gone"))
	parent.End()
	s := spanOfKind(t, exp.GetSpans(), trace.SpanKindProducer)
	if s.Status.Code != otelcodes.Error || s.Status.Description != "broker gone" {
		t.Errorf("status %+v", s.Status)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["messaging.system"] != "pulsar" || attrs["messaging.destination.name"] != "persistent://tg/request/x" {
		t.Errorf("attributes %v", attrs)
	}
}

// A sampled call leaves its trace id as an exemplar on the latency
// histogram, for OpenMetrics scrapers: with spans exported (WithSpans),
// its own span's; without, the trace context it carried, if any.
func TestDurationExemplar(t *testing.T) {
	t.Parallel()
	scrape := func(t *testing.T, m *Metrics) string {
		hs := httptest.NewServer(m.Handler())
		defer hs.Close()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL, nil)
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	t.Run("spans", func(t *testing.T) {
		tp, exp := inMemoryTracing(t)
		m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics(), WithSpans())
		h := toolcall.Chain(newStub().handle, SpanMiddleware(tp), m.Middleware())
		if _, _, err := serve(t.Context(), h, invokeCall("echo", nil)); err != nil {
			t.Fatal(err)
		}
		traceID := spanOfKind(t, exp.GetSpans(), trace.SpanKindServer).SpanContext.TraceID().String()
		if body := scrape(t, m); !strings.Contains(body, `trace_id="`+traceID+`"`) {
			t.Errorf("no exemplar for trace %s in:\n%s", traceID, body)
		}
	})
	t.Run("caller's trace context", func(t *testing.T) {
		m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
		h := toolcall.Chain(newStub().handle, TraceContextMiddleware(), m.Middleware())
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		if _, _, err := serve(t.Context(), h, invokeCall("echo", mdHeader{"traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}})); err != nil {
			t.Fatal(err)
		}
		if _, _, err := serve(t.Context(), h, invokeCall("echo", nil)); err != nil {
			t.Fatal(err)
		}
		body := scrape(t, m)
		if strings.Count(body, `trace_id="`) != 1 || !strings.Contains(body, `trace_id="`+traceID+`"`) {
			t.Errorf("want one exemplar, for trace %s, in:\n%s", traceID, body)
		}
	})
}

func TestSetupTracingOff(t *testing.T) {
	// Not parallel: SetupTracing sets OpenTelemetry's globals.
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	shutdown, err := SetupTracing(t.Context(), TracingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("t").Start(t.Context(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("tracing off still records spans")
	}
	span.End()
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// fakeCollector is an OTLP/gRPC trace collector that remembers the
// service.name and span names it receives.
type fakeCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	services []string
	spans    []string
}

func (c *fakeCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				c.services = append(c.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s.GetName())
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestSetupTracingExportsOverOTLP(t *testing.T) {
	// Not parallel: SetupTracing sets OpenTelemetry's globals.
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &fakeCollector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()

	tests := []struct {
		name string
		cfg  TracingConfig
	}{
		{"host:port insecure", TracingConfig{OTLPEndpoint: lis.Addr().String(), OTLPInsecure: true}},
		{"http URL", TracingConfig{OTLPEndpoint: "http://" + lis.Addr().String()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col.mu.Lock()
			col.services, col.spans = nil, nil
			col.mu.Unlock()
			shutdown, err := SetupTracing(t.Context(), tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("t").Start(t.Context(), "exported")
			span.End()
			sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			if len(col.spans) != 1 || col.spans[0] != "exported" || len(col.services) != 1 || col.services[0] != "toolgate" {
				t.Errorf("collector got spans %v from services %v", col.spans, col.services)
			}
		})
	}
}

func TestSetupTracingRejectsABadSampleRatio(t *testing.T) {
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	for _, cfg := range []TracingConfig{
		{SampleRatio: 2},
		{SampleRatio: -0.5, Exporter: tracetest.NewInMemoryExporter()},
	} {
		if _, err := SetupTracing(t.Context(), cfg); err == nil {
			t.Errorf("sample ratio %v accepted", cfg.SampleRatio)
		}
	}
}

func BenchmarkInjectTraceparent(b *testing.B) {
	exp := tracetest.NewNoopExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	on, span := tp.Tracer("b").Start(context.Background(), "x")
	defer span.End()
	remote := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": callerTraceparent})
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{
		{"off", context.Background()},
		{"off with caller's trace", remote},
		{"on", on},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			props := make(map[string]string, 4)
			for b.Loop() {
				InjectTraceparent(bc.ctx, props)
			}
		})
	}
}

// A call gets one server span, named after its method, a child of the
// caller's trace and in the handler's context, marked failed when the
// call fails; SpanMiddleware(nil) takes OpenTelemetry's global provider.
func TestSpanMiddleware(t *testing.T) {
	// Not parallel: the middleware uses OpenTelemetry's global provider.
	tp, exp := inMemoryTracing(t)
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	mw := SpanMiddleware(nil)
	var inner trace.SpanContext
	ok := toolcall.Chain(func(ctx context.Context, _ *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		inner = trace.SpanContextFromContext(ctx)
		return toolcall.Result{}, nil
	}, mw)
	failing := toolcall.Chain(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{}, errors.New("boom")
	}, mw)
	refusing := toolcall.Chain(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{}, status.Error(codes.PermissionDenied, "no")
	}, mw)
	_, _, _ = serve(t.Context(), ok, invokeCall("echo", mdHeader{"traceparent": {callerTraceparent}}))
	_, _, _ = serve(t.Context(), failing, invokeCall("echo", nil))
	_, _, _ = serve(t.Context(), refusing, &toolcall.Call{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "echo", Header: toolcall.NoHeader})
	okInner := inner
	_, _, _ = serve(t.Context(), ok, &toolcall.Call{Op: toolcall.OpListTools, Header: header("Traceparent", callerTraceparent)})
	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	okSpan, failed, refused, list := spans[0], spans[1], spans[2], spans[3]
	if okSpan.SpanKind != trace.SpanKindServer || okSpan.Name != "execute_tool echo" {
		t.Errorf("span %q of kind %v, want a server span named execute_tool echo (GenAI semantic conventions)", okSpan.Name, okSpan.SpanKind)
	}
	if attr(okSpan, "gen_ai.operation.name") != "execute_tool" || attr(okSpan, "gen_ai.tool.name") != "echo" ||
		attr(okSpan, "gen_ai.tool.type") != "extension" || attr(okSpan, "rpc.method") != "toolgate.v1.ToolService/InvokeTool" ||
		attr(okSpan, "mcp.method.name") != "" {
		t.Errorf("tool call span attributes %v", okSpan.Attributes)
	}
	if okSpan.Parent.TraceID().String() != callerTraceID || !okSpan.Parent.IsRemote() || okInner.SpanID() != okSpan.SpanContext.SpanID() {
		t.Errorf("span not a child of the caller's trace, or not in the handler's context")
	}
	if okSpan.Status.Code == otelcodes.Error {
		t.Errorf("successful call's span status %v", okSpan.Status)
	}
	if failed.Status.Code != otelcodes.Error || failed.Parent.IsValid() {
		t.Errorf("failed call's span: status %v, parent %v; want Error and a new trace", failed.Status.Code, failed.Parent)
	}
	if attr(failed, "rpc.grpc.status_code") != "Unknown" || attr(refused, "rpc.grpc.status_code") != "PermissionDenied" {
		t.Errorf("status code attributes %q, %q; want Unknown, PermissionDenied",
			attr(failed, "rpc.grpc.status_code"), attr(refused, "rpc.grpc.status_code"))
	}
	if refused.Name != "tools/call echo" || attr(refused, "rpc.method") != "mcp/InvokeTool" || attr(refused, "mcp.method.name") != "tools/call" ||
		attr(refused, "gen_ai.tool.name") != "echo" || attr(refused, "error.type") != "PermissionDenied" {
		t.Errorf("an MCP call: span %q, attributes %v; want tools/call echo (MCP semantic conventions)", refused.Name, refused.Attributes)
	}
	if list.Name != "toolgate.v1.ToolService/ListTools" || list.Parent.TraceID().String() != callerTraceID || inner.SpanID() != list.SpanContext.SpanID() {
		t.Errorf("ListTools span %q in trace %s", list.Name, list.Parent.TraceID())
	}
}

// The call log notes the request id and the tool on the call's span.
func TestCallLogSpanAttributes(t *testing.T) {
	t.Parallel()
	tp, exp := inMemoryTracing(t)
	cl := NewCallLog(nil)
	h := toolcall.Chain(newStub().handle, SpanMiddleware(tp), cl.Middleware())
	if _, _, err := serve(t.Context(), h, invokeCall("echo", header(RequestIDHeader, "span-1"))); err != nil {
		t.Fatal(err)
	}
	s := spanOfKind(t, exp.GetSpans(), trace.SpanKindServer)
	if attr(s, "toolgate.request_id") != "span-1" || attr(s, "toolgate.tool") != "echo" {
		t.Errorf("span attributes %v", s.Attributes)
	}
}

// attr is the value of a span's attribute, "" without it.
func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
