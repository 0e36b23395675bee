package app

import (
	"context"
	"strings"

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
	srv toolgatev1.ToolServiceServer
	// Each method's interceptor chain, composed once: the method's info and
	// final handler never change, so a call allocates no closures for it.
	invoke, listTools, getTool, listServices, getService grpc.UnaryHandler
	stream                                               grpc.StreamHandler
}

func newInProcess(srv toolgatev1.ToolServiceServer, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *inProcess {
	p := &inProcess{srv: srv}
	u := func(method string, final grpc.UnaryHandler) grpc.UnaryHandler {
		return composeUnary(unary, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, final)
	}
	p.invoke = u(toolgatev1.ToolService_InvokeTool_FullMethodName, func(ctx context.Context, r any) (any, error) {
		return srv.InvokeTool(ctx, r.(*toolgatev1.InvokeToolRequest))
	})
	p.listTools = u(toolgatev1.ToolService_ListTools_FullMethodName, func(ctx context.Context, r any) (any, error) {
		return srv.ListTools(ctx, r.(*toolgatev1.ListToolsRequest))
	})
	p.getTool = u(toolgatev1.ToolService_GetTool_FullMethodName, func(ctx context.Context, r any) (any, error) {
		return srv.GetTool(ctx, r.(*toolgatev1.GetToolRequest))
	})
	p.listServices = u(toolgatev1.ToolService_ListToolServices_FullMethodName, func(ctx context.Context, r any) (any, error) {
		return srv.ListToolServices(ctx, r.(*toolgatev1.ListToolServicesRequest))
	})
	p.getService = u(toolgatev1.ToolService_GetToolService_FullMethodName, func(ctx context.Context, r any) (any, error) {
		return srv.GetToolService(ctx, r.(*toolgatev1.GetToolServiceRequest))
	})
	p.stream = composeStream(stream, streamInfo, func(_ any, ss grpc.ServerStream) error {
		m := new(toolgatev1.StreamToolRequest)
		if err := ss.RecvMsg(m); err != nil {
			return err
		}
		return srv.StreamTool(m, &grpc.GenericServerStream[toolgatev1.StreamToolRequest, toolgatev1.StreamToolResponse]{ServerStream: ss})
	})
	return p
}

// composeUnary chains interceptors around final the way
// grpc.ChainUnaryInterceptor does (the first is the outermost), for one
// method whose info is fixed.
func composeUnary(ics []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	h := final
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	return h
}

// composeStream does the same for stream interceptors.
func composeStream(ics []grpc.StreamServerInterceptor, info *grpc.StreamServerInfo, final grpc.StreamHandler) grpc.StreamHandler {
	h := final
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(srv any, ss grpc.ServerStream) error { return ic(srv, ss, info, next) }
	}
	return h
}

// call runs one method's composed chain and checks the answer's type.
func call[Resp any](ctx context.Context, h grpc.UnaryHandler, method string, req any) (Resp, error) {
	out, err := h(ctx, req)
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
	return call[*toolgatev1.InvokeToolResponse](ctx, p.invoke, toolgatev1.ToolService_InvokeTool_FullMethodName, r)
}

func (p *inProcess) ListTools(ctx context.Context, r *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return call[*toolgatev1.ListToolsResponse](ctx, p.listTools, toolgatev1.ToolService_ListTools_FullMethodName, r)
}

func (p *inProcess) GetTool(ctx context.Context, r *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	return call[*toolgatev1.GetToolResponse](ctx, p.getTool, toolgatev1.ToolService_GetTool_FullMethodName, r)
}

func (p *inProcess) ListToolServices(ctx context.Context, r *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	return call[*toolgatev1.ListToolServicesResponse](ctx, p.listServices, toolgatev1.ToolService_ListToolServices_FullMethodName, r)
}

func (p *inProcess) GetToolService(ctx context.Context, r *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	return call[*toolgatev1.GetToolServiceResponse](ctx, p.getService, toolgatev1.ToolService_GetToolService_FullMethodName, r)
}

var streamInfo = &grpc.StreamServerInfo{FullMethod: toolgatev1.ToolService_StreamTool_FullMethodName, IsServerStream: true}

// StreamTool runs a streaming call through the stream chain. The
// interceptors see the request the way they see a gRPC one: as the first
// message the handler receives (auth checks the tool named in it).
func (p *inProcess) StreamTool(req *toolgatev1.StreamToolRequest, ss grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	return p.stream(p.srv, &requestStream{ServerStream: ss, req: req})
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

// toolServicePrefix starts the full method names of the ToolService.
var toolServicePrefix = "/" + toolgatev1.ToolService_ServiceDesc.ServiceName + "/"

// grpcService is the ToolService as the gRPC server serves it: the unary
// methods run their composed chains (the server's interceptor lets them
// pass, unaryExcept), StreamTool the server's stream chain, as grpc-go
// hands the stream over with its request not yet read.
type grpcService struct{ *inProcess }

func (s grpcService) StreamTool(req *toolgatev1.StreamToolRequest, ss grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	return s.srv.StreamTool(req, ss)
}

// unaryExcept is the gRPC server's unary interceptor: the chain ics for
// every method but those starting with prefix, which run their own.
func unaryExcept(prefix string, ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, prefix) {
			return handler(ctx, req)
		}
		return composeUnary(ics, info, handler)(ctx, req)
	}
}
