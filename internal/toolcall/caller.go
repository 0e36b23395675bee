package toolcall

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
)

// CallerSigner signs caller assertions (wire.PropCaller): it sets their
// issuer and time of issue, and returns the compact JWS.
// internal/callerassert's Signer is one.
type CallerSigner interface {
	Sign(c wire.CallerClaims) (string, error)
}

// callerClaims are the claims of the caller assertion of c's request to
// tool, whose id is id, good until deadline: who the call comes from (the
// principal, as operations are owned), how they authenticated, their
// roles, the tool service (its id, else its request topic), the tool by
// the registry's name and the set it was called in.
func (s *Core) callerClaims(c *Call, tool *registry.Tool, id string, deadline time.Time) wire.CallerClaims {
	cl := wire.CallerClaims{Subject: s.owner(c), Source: SourceAnonymous, Audience: tool.Service.ID, Tool: tool.Name, ToolSet: c.Set, ID: id,
		Expires: (deadline.UnixNano() + int64(time.Second) - 1) / int64(time.Second)}
	if c.Authenticated && c.Caller.Method != "" {
		cl.Source, cl.Roles = c.Caller.Method, c.Caller.Roles
	}
	if cl.Audience == "" {
		cl.Audience = tool.Service.RequestTopic
	}
	return cl
}

// assert picks the id of c's request and signs its caller assertion.
func (s *Core) assert(c *Call, tool *registry.Tool, deadline time.Time) (Assertion, error) {
	id := randid.New()
	tok, err := s.opts.Callers.Sign(s.callerClaims(c, tool, id, deadline))
	if err != nil {
		return Assertion{}, fmt.Errorf("caller assertion: %w", err)
	}
	return Assertion{ID: id, Token: tok}, nil
}

// assertOperation is the signer of the caller assertion of an operation's
// request (OperationStart.Assert); nil without Options.Callers.
func (s *Core) assertOperation(c *Call, tool *registry.Tool, deadline time.Time) func(id string) (string, error) {
	if s.opts.Callers == nil {
		return nil
	}
	return func(id string) (string, error) {
		return s.opts.Callers.Sign(s.callerClaims(c, tool, id, deadline))
	}
}
