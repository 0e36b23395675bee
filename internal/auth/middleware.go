package auth

import (
	"context"

	"github.com/toolgate/toolgate/internal/toolcall"
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
// and authorizes it against the policy.
func (a *Authenticator) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if err := a.Authenticate(ctx, c); err != nil {
				return toolcall.Result{}, err
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
