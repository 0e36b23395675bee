package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/telemetry"
	"google.golang.org/grpc"
)

// The gRPC server's telemetry, in order: the tracing stats handler (a span
// around everything), the call log first so refused calls are logged, the
// metrics so refused calls are counted, authentication, and the call
// log's user interceptor to note who the caller turned out to be.
func Example() {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	shutdown, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{OTLPEndpoint: "", Logger: log})
	if err != nil {
		panic(err)
	}
	defer func() { _ = shutdown(ctx) }()

	var (
		authUnary  grpc.UnaryServerInterceptor                        = pass // auth.Authenticator.UnaryInterceptor()
		authStream grpc.StreamServerInterceptor                              // auth.Authenticator.StreamInterceptor()
		user       = func(context.Context) string { return "alice" }         // auth.User
		known      = func(tool string) bool { return tool == "echo" }        // a lookup in the registry snapshot
	)
	metrics := telemetry.NewMetrics(telemetry.WithKnownTools(known), telemetry.WithoutRuntimeMetrics())
	calls := telemetry.NewCallLog(log, telemetry.WithUser(user))
	spanUnary, spanStream := telemetry.ServerSpanInterceptors(nil) // with tracing on
	unary := []grpc.UnaryServerInterceptor{spanUnary, calls.UnaryServerInterceptor(), metrics.UnaryServerInterceptor(), authUnary, calls.UnaryUserInterceptor()}
	_ = grpc.NewServer(
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(spanStream, calls.StreamServerInterceptor(), metrics.StreamServerInterceptor(), calls.StreamUserInterceptor()),
	)
	_ = authStream

	// One call through the metrics interceptor, then a scrape.
	info := &grpc.UnaryServerInfo{FullMethod: toolgatev1.ToolService_InvokeTool_FullMethodName}
	_, _ = metrics.UnaryServerInterceptor()(ctx, &toolgatev1.InvokeToolRequest{Name: "echo"}, info,
		func(context.Context, any) (any, error) { return &toolgatev1.InvokeToolResponse{}, nil })
	rec := httptest.NewRecorder()
	metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "toolgate_calls_total{") {
			fmt.Println(line)
		}
	}
	// Output:
	// toolgate_calls_total{code="OK",method="/toolgate.v1.ToolService/InvokeTool",tool="echo"} 1
}

// pass is an interceptor that lets every call through.
func pass(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}
