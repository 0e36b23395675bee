package auth

import (
	"context"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// resource says what a call does, for the policy: the action and the tool
// it acts on ("" for none in particular).
func resource(c *toolcall.Call) (action, tool string, known bool) {
	switch c.Op {
	case toolcall.OpInvoke, toolcall.OpStream, toolcall.OpStartTool:
		return ActionInvoke, c.Name, true
	case toolcall.OpGetOperation, toolcall.OpListOperations, toolcall.OpCancelOperation,
		toolcall.OpDeleteOperation, toolcall.OpWaitOperation, toolcall.OpStreamOperation:
		// A caller only ever sees their own operations: no action of the
		// policy is needed (action "").
		return "", "", true
	case toolcall.OpGetTool:
		return ActionList, c.Name, true
	case toolcall.OpListTools, toolcall.OpListServices, toolcall.OpGetService:
		return ActionList, "", true
	}
	return "", "", false
}

// Middleware authenticates every call, records its caller in the call,
// and authorizes it against the policy: Authentication, then
// Authorization, for a chain with nothing between them.
func (a *Authenticator) Middleware() toolcall.Middleware {
	authn, authz := a.Authentication(), a.Authorization()
	return func(next toolcall.Handler) toolcall.Handler { return authn(authz(next)) }
}

// Authentication is the middleware that establishes every call's caller
// (Authenticate). A call a door has authenticated already (MCP's, once
// per request) goes on as it is.
func (a *Authenticator) Authentication() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if err := a.Authenticate(ctx, c); err != nil {
				return toolcall.Result{}, err
			}
			return next(ctx, c, emit)
		}
	}
}

// Authorization is the middleware that authorizes every call against the
// policy. It runs after Authentication; what is between the two may
// change the call's name (a tool set resolves its name for a tool to the
// registry's, which the policy knows). A call that reaches it
// unauthenticated is refused: the chain is built wrong.
func (a *Authenticator) Authorization() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if !c.Authenticated {
				return toolcall.Result{}, status.Error(codes.Internal, "a call reached authorization without authentication")
			}
			if err := a.authorize(ctx, c); err != nil {
				return toolcall.Result{}, err
			}
			return next(ctx, c, emit)
		}
	}
}

// Authenticate establishes c's caller (c.Caller, c.Authenticated) without
// authorizing anything: for a door that must refuse a request before it
// makes any call (MCP's HTTP 401). The error is an Unauthenticated status.
func (a *Authenticator) Authenticate(ctx context.Context, c *toolcall.Call) error {
	if c.Authenticated {
		return nil
	}
	id, err := a.authenticate(c)
	if err != nil {
		return a.fail(ctx, c, err)
	}
	a.policy.join(&id)
	c.Caller, c.Authenticated = id, true
	return nil
}
