package app

import (
	"context"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inProcess serves calls that arrive by HTTP (REST, MCP) without a network
// hop: every method runs the gRPC server's own interceptor chain, then the
// service itself, so authentication, authorization, limits, logs, metrics
// and spans are the same whichever door a call came in by.
type inProcess struct {
	toolgatev1.UnimplementedToolServiceServer
	srv    toolgatev1.ToolServiceServer
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

func newInProcess(srv toolgatev1.ToolServiceServer, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *inProcess {
	return &inProcess{srv: srv, unary: chainUnary(unary), stream: chainStream(stream)}
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

// chainStream composes stream interceptors the same way.
func chainStream(ics []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, final grpc.StreamHandler) error {
		var next func(i int) grpc.StreamHandler
		next = func(i int) grpc.StreamHandler {
			if i == len(ics) {
				return final
			}
			return func(srv any, ss grpc.ServerStream) error {
				return ics[i](srv, ss, info, next(i+1))
			}
		}
		return next(0)(srv, ss)
	}
}

// call runs one unary method through the chain.
func call[Req, Resp any](ctx context.Context, p *inProcess, method string, req Req, h func(context.Context, Req) (Resp, error)) (Resp, error) {
	out, err := p.unary(ctx, req, &grpc.UnaryServerInfo{Server: p.srv, FullMethod: method},
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
	return call(ctx, p, toolgatev1.ToolService_InvokeTool_FullMethodName, r, p.srv.InvokeTool)
}

func (p *inProcess) ListTools(ctx context.Context, r *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return call(ctx, p, toolgatev1.ToolService_ListTools_FullMethodName, r, p.srv.ListTools)
}

func (p *inProcess) GetTool(ctx context.Context, r *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	return call(ctx, p, toolgatev1.ToolService_GetTool_FullMethodName, r, p.srv.GetTool)
}

func (p *inProcess) ListToolServices(ctx context.Context, r *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	return call(ctx, p, toolgatev1.ToolService_ListToolServices_FullMethodName, r, p.srv.ListToolServices)
}

func (p *inProcess) GetToolService(ctx context.Context, r *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	return call(ctx, p, toolgatev1.ToolService_GetToolService_FullMethodName, r, p.srv.GetToolService)
}

var streamInfo = &grpc.StreamServerInfo{FullMethod: toolgatev1.ToolService_StreamTool_FullMethodName, IsServerStream: true}

// StreamTool runs a streaming call through the stream chain. The
// interceptors see the request the way they see a gRPC one: as the first
// message the handler receives (auth checks the tool named in it).
func (p *inProcess) StreamTool(req *toolgatev1.StreamToolRequest, ss grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	return p.stream(p.srv, &requestStream{ServerStream: ss, req: req}, streamInfo, func(_ any, ss grpc.ServerStream) error {
		m := new(toolgatev1.StreamToolRequest)
		if err := ss.RecvMsg(m); err != nil {
			return err
		}
		return p.srv.StreamTool(m, &grpc.GenericServerStream[toolgatev1.StreamToolRequest, toolgatev1.StreamToolResponse]{ServerStream: ss})
	})
}

// requestStream hands out its one request message to the first RecvMsg.
type requestStream struct {
	grpc.ServerStream
	req  *toolgatev1.StreamToolRequest
	done bool
}

func (s *requestStream) RecvMsg(m any) error {
	r, ok := m.(*toolgatev1.StreamToolRequest)
	if !ok || s.done {
		return status.Error(codes.Internal, "in-process stream: one request message only")
	}
	s.done = true
	// The fields are shared, not copied: the request is not used again.
	r.Name, r.Arguments, r.Timeout = s.req.GetName(), s.req.GetArguments(), s.req.GetTimeout()
	return nil
}
