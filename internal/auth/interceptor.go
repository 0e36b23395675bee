package auth

import (
	"context"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
)

// Resource says what a call does, for the policy: the action and the tool
// it acts on ("" for none in particular). req is the request message, or
// nil when it is not known yet (a stream before its first message).
// known is false for methods the policy does not cover; they are denied
// when a policy is set.
type Resource func(fullMethod string, req any) (action, tool string, known bool)

// ToolgateResource describes toolgate.v1.ToolService's methods: InvokeTool
// and StreamTool invoke the named tool, GetTool lists it, and ListTools,
// ListToolServices and GetToolService list tools in general.
func ToolgateResource(fullMethod string, req any) (action, tool string, known bool) {
	name := func() string {
		if n, ok := req.(interface{ GetName() string }); ok {
			return n.GetName()
		}
		return ""
	}
	switch fullMethod {
	case toolgatev1.ToolService_InvokeTool_FullMethodName, toolgatev1.ToolService_StreamTool_FullMethodName:
		return ActionInvoke, name(), true
	case toolgatev1.ToolService_GetTool_FullMethodName:
		return ActionList, name(), true
	case toolgatev1.ToolService_ListTools_FullMethodName, toolgatev1.ToolService_ListToolServices_FullMethodName,
		toolgatev1.ToolService_GetToolService_FullMethodName:
		return ActionList, "", true
	}
	return "", "", false
}

// start authenticates a call and returns its context with the identity.
func (a *Authenticator) start(ctx context.Context, method string) (context.Context, Identity, error) {
	id, err := a.authenticate(ctx, method)
	if err != nil {
		return nil, Identity{}, a.fail(ctx, method, err)
	}
	return newContext(ctx, id), id, nil
}

// UnaryInterceptor authenticates and authorizes unary calls.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if a.isPublic(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, id, err := a.start(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if err := a.authorize(ctx, id, info.FullMethod, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authenticates streams when they open and authorizes
// them on their first request message, which names the tool.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if a.isPublic(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, id, err := a.start(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if a.policy != nil {
			if _, _, known := a.resource(info.FullMethod, nil); !known {
				return a.authorize(ctx, id, info.FullMethod, nil)
			}
		}
		return handler(srv, &authStream{ServerStream: ss, ctx: ctx, check: func(m any) error {
			return a.authorize(ctx, id, info.FullMethod, m)
		}})
	}
}

// authStream gives the handler the authenticated context and authorizes
// the call when its first message arrives, before the handler sees it. A
// denial sticks: every later RecvMsg and SendMsg returns it too.
type authStream struct {
	grpc.ServerStream
	ctx     context.Context
	check   func(m any) error
	checked bool
	denied  error
}

func (s *authStream) Context() context.Context { return s.ctx }

func (s *authStream) RecvMsg(m any) error {
	if s.denied != nil {
		return s.denied
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		s.denied = s.check(m)
	}
	return s.denied
}

func (s *authStream) SendMsg(m any) error {
	if s.denied != nil {
		return s.denied
	}
	return s.ServerStream.SendMsg(m)
}
