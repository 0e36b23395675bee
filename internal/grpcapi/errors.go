package grpcapi

import (
	"context"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// ReasonMethodNotFound is the ErrorInfo reason of a call to a method the
// server does not have.
const ReasonMethodNotFound = "METHOD_NOT_FOUND"

// ServerOptions are what the gRPC door asks of the server it is
// registered on: every error a method answers carries an ErrorInfo (those
// of the core have theirs; any other gets one named after its code), and a
// method the server does not have is UNIMPLEMENTED with one.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, toolcall.WithErrorInfo(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return toolcall.WithErrorInfo(h(srv, ss))
		}),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(ss)
			return toolcall.GatewayError(codes.Unimplemented, ReasonMethodNotFound, "unknown method "+method, map[string]string{"method": method})
		}),
	}
}
