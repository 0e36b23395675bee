// Package grpctest runs a real gRPC server — the ToolService under test
// and the health service — on an in-memory listener, for tests that need
// a server with interceptors and a client connection to it.
package grpctest

import (
	"context"
	"net"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"
)

// Listen serves svc and the health service with opts on an in-memory
// listener until the test ends.
func Listen(t testing.TB, svc toolgatev1.ToolServiceServer, opts ...grpc.ServerOption) *bufconn.Listener {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	toolgatev1.RegisterToolServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis
}

// Dial connects to lis; without transport credentials in opts, in plain
// text. The connection is closed when the test ends.
func Dial(t testing.TB, lis *bufconn.Listener, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Start is Listen and a plain-text Dial.
func Start(t testing.TB, svc toolgatev1.ToolServiceServer, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return Dial(t, Listen(t, svc, opts...))
}
