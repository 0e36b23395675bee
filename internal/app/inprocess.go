package app

import (
	"context"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inProcess serves REST's unary calls without the loopback gRPC hop: it
// runs the interceptors it is given (the gRPC server's chain, plus a server
// span when spans are exported), then the service itself.
// Streaming calls keep going through the gRPC connection, because
// grpc-gateway cannot stream in process.
type inProcess struct {
	toolgatev1.UnimplementedToolServiceServer
	srv   toolgatev1.ToolServiceServer
	chain grpc.UnaryServerInterceptor
}

func newInProcess(srv toolgatev1.ToolServiceServer, interceptors []grpc.UnaryServerInterceptor) *inProcess {
	return &inProcess{srv: srv, chain: chainUnary(interceptors)}
}

// chainUnary composes interceptors the way grpc.ChainUnaryInterceptor
// does: the first is the outermost.
func chainUnary(ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) (any, error) {
		var next func(i int) grpc.UnaryHandler
		next = func(i int) grpc.UnaryHandler {
			if i == len(ics) {
				return final
			}
			return func(ctx context.Context, req any) (any, error) {
				return ics[i](ctx, req, info, next(i+1))
			}
		}
		return next(0)(ctx, req)
	}
}

// call runs one unary method through the chain.
func call[Req, Resp any](p *inProcess, ctx context.Context, method string, req Req, h func(context.Context, Req) (Resp, error)) (Resp, error) {
	out, err := p.chain(ctx, req, &grpc.UnaryServerInfo{Server: p.srv, FullMethod: method},
		func(ctx context.Context, r any) (any, error) { return h(ctx, r.(Req)) })
	if err != nil {
		var zero Resp
		return zero, err
	}
	resp, ok := out.(Resp)
	if !ok {
		var zero Resp
		return zero, status.Errorf(codes.Internal, "%s: unexpected response type %T", method, out)
	}
	return resp, nil
}

func (p *inProcess) InvokeTool(ctx context.Context, r *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return call(p, ctx, toolgatev1.ToolService_InvokeTool_FullMethodName, r, p.srv.InvokeTool)
}

func (p *inProcess) ListTools(ctx context.Context, r *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return call(p, ctx, toolgatev1.ToolService_ListTools_FullMethodName, r, p.srv.ListTools)
}

func (p *inProcess) GetTool(ctx context.Context, r *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	return call(p, ctx, toolgatev1.ToolService_GetTool_FullMethodName, r, p.srv.GetTool)
}

func (p *inProcess) ListToolServices(ctx context.Context, r *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	return call(p, ctx, toolgatev1.ToolService_ListToolServices_FullMethodName, r, p.srv.ListToolServices)
}

func (p *inProcess) GetToolService(ctx context.Context, r *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	return call(p, ctx, toolgatev1.ToolService_GetToolService_FullMethodName, r, p.srv.GetToolService)
}
