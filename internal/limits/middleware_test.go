package limits

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/grpctest"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type okServer struct {
	toolgatev1.UnimplementedToolServiceServer
}

func (okServer) InvokeTool(_ context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return &toolgatev1.InvokeToolResponse{Output: "ok " + req.GetName()}, nil
}

func (okServer) StreamTool(req *toolgatev1.StreamToolRequest, s toolgatev1.ToolService_StreamToolServer) error {
	return s.Send(&toolgatev1.StreamToolResponse{Output: "ok " + req.GetName(), Last: true})
}

// userKey keys buckets by the "x-user" metadata, standing in for the
// authenticated identity.
func userKey(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-user"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// serve runs a real gRPC server with l's interceptors on an in-memory
// listener and returns a connection to it.
func serve(t *testing.T, l *Limiter) *grpc.ClientConn {
	t.Helper()
	return grpctest.Start(t, okServer{}, grpc.ChainUnaryInterceptor(l.UnaryInterceptor()), grpc.ChainStreamInterceptor(l.StreamInterceptor()))
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	// One call a minute, bursts of two.
	l, err := New(1.0/60, 2, WithKey(userKey))
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, l)
	client := toolgatev1.NewToolServiceClient(conn)
	invoke := func(ctx context.Context) error {
		_, err := client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "t"})
		return err
	}
	stream := func(ctx context.Context) error {
		s, err := client.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "t"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	health := func(ctx context.Context) error {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	tests := []struct {
		name  string
		user  string
		calls []func(context.Context) error
		codes []codes.Code
	}{
		{"unary over the limit", "ann", []func(context.Context) error{invoke, invoke, invoke}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"streams over the limit", "ben", []func(context.Context) error{stream, stream, stream}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"unary and streams share the bucket", "cat", []func(context.Context) error{stream, invoke, stream}, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
		{"health checks are exempt", "dan", []func(context.Context) error{health, health, health, health}, []codes.Code{codes.OK, codes.OK, codes.OK, codes.OK}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user", tc.user)
			for i, c := range tc.calls {
				err := c(ctx)
				if status.Code(err) != tc.codes[i] {
					t.Fatalf("call %d: %v, want %v", i, err, tc.codes[i])
				}
				if tc.codes[i] == codes.ResourceExhausted {
					checkExceeded(t, err, time.Minute)
				}
			}
		})
	}
}

// checkExceeded checks a refusal's message and details: a RetryInfo with
// a delay in (0, most], and an ErrorInfo.
func checkExceeded(t *testing.T, err error, most time.Duration) {
	t.Helper()
	st := status.Convert(err)
	var ri *errdetails.RetryInfo
	var ei *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.ErrorInfo:
			ei = d
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > most {
		t.Fatalf("RetryInfo %v, want a delay in (0, %v]", ri, most)
	}
	if ei == nil || ei.GetReason() != ReasonRateLimited || ei.GetDomain() != ErrorDomain {
		t.Fatalf("ErrorInfo %v, want reason %s", ei, ReasonRateLimited)
	}
	if want := "rate limit exceeded: retry in "; len(st.Message()) <= len(want) || st.Message()[:len(want)] != want {
		t.Fatalf("message %q", st.Message())
	}
}
