package telemetry_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/toolgate/toolgate/internal/telemetry"
	"google.golang.org/grpc"
)

// The gRPC server's telemetry, in order: the tracing stats handler (a span
// around everything), the call log first so refused calls are logged, the
// metrics so refused calls are counted, authentication, and the call
// log's user interceptor to note who the caller turned out to be.
func Example() {
	ctx := context.Background()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	shutdown, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{OTLPEndpoint: "", Logger: log})
	if err != nil {
		panic(err)
	}
	defer func() { _ = shutdown(ctx) }()

	var (
		authUnary  grpc.UnaryServerInterceptor  // auth.Authenticator.UnaryInterceptor()
		authStream grpc.StreamServerInterceptor // auth.Authenticator.StreamInterceptor()
		user       func(context.Context) string // auth.User
		known      func(tool string) bool       // a lookup in the registry snapshot
	)
	metrics := telemetry.NewMetrics(telemetry.WithKnownTools(known))
	calls := telemetry.NewCallLog(log, telemetry.WithUser(user))
	spanUnary, spanStream := telemetry.ServerSpanInterceptors(nil) // with tracing on
	_ = grpc.NewServer(
		grpc.ChainUnaryInterceptor(spanUnary), grpc.ChainStreamInterceptor(spanStream),
		grpc.ChainUnaryInterceptor(calls.UnaryServerInterceptor(), metrics.UnaryServerInterceptor(), authUnary, calls.UnaryUserInterceptor()),
		grpc.ChainStreamInterceptor(calls.StreamServerInterceptor(), metrics.StreamServerInterceptor(), authStream, calls.StreamUserInterceptor()),
	)
	http.Handle("GET /metrics", metrics.Handler())
}
