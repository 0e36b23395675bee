package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// The telemetry of the call chain every door runs, in order: the trace
// middleware (a span around everything when tracing is on, else only the
// caller's trace context passed on), the call log first so refused calls
// are logged, the metrics so refused calls are counted, then
// authentication, which names the caller the call log reports.
func Example() {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	shutdown, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{OTLPEndpoint: "", Logger: log})
	if err != nil {
		panic(err)
	}
	defer func() { _ = shutdown(ctx) }()

	var (
		authn   toolcall.Middleware = pass                                             // auth.Authenticator.Middleware()
		known                       = func(tool string) bool { return tool == "echo" } // a lookup in the registry snapshot
		tracing                     = false                                            // an OTLP endpoint configured
	)
	core := func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) { // toolcall.Core.Handle
		return toolcall.Result{Output: "hi"}, nil
	}
	metrics := telemetry.NewMetrics(telemetry.WithKnownTools(known), telemetry.WithoutRuntimeMetrics())
	calls := telemetry.NewCallLog(log)
	trace := telemetry.TraceContextMiddleware()
	if tracing {
		trace = telemetry.SpanMiddleware(nil)
	}
	h := toolcall.Chain(core, trace, calls.Middleware(), metrics.Middleware(), authn)

	// One call, as a door builds it, then a scrape.
	c := &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Args: []byte(`{}`), Header: httpcall.Header(http.Header{"X-Request-Id": {"req-1"}})}
	if _, err := h(ctx, c, nil); err != nil {
		panic(err)
	}
	fmt.Println("x-request-id:", c.RequestID) // the door answers it
	rec := httptest.NewRecorder()
	metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "toolgate_calls_total{") {
			fmt.Println(line)
		}
	}
	// Output:
	// x-request-id: req-1
	// toolgate_calls_total{code="OK",method="/toolgate.v1.ToolService/InvokeTool",tool="echo"} 1
}

// pass is a middleware that lets every call through.
func pass(next toolcall.Handler) toolcall.Handler { return next }
