package toolcall

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
)

// HeaderToolSet is the metadata key (gRPC metadata, an HTTP header) that
// names the tool set a call is made in, when the door gives it no other
// way.
const HeaderToolSet = "tool-set"

// The reasons of a call whose tool set cannot be served: one the registry
// does not hold (NOT_FOUND); two sets named at once, or a set named where
// none applies (INVALID_ARGUMENT).
const (
	ReasonToolSetNotFound      = "TOOL_SET_NOT_FOUND"
	ReasonToolSetConflict      = "TOOL_SET_CONFLICT"
	ReasonToolSetNotApplicable = "TOOL_SET_NOT_APPLICABLE"
)

// ToolSets resolves the tool set of a call: the set it names (Call.Set,
// and the HeaderToolSet metadata, which must then name the same one) must
// exist, and a tool named within it (invoke, stream, start, get) must be
// one the set shows, whose name is then replaced by the registry's — so
// that the policy, the quotas and the core see the registry's tool — and
// kept as Call.Shown, which what the caller is told names. A tool outside
// the set is NOT_FOUND, as an unknown one; two different sets named at
// once are INVALID_ARGUMENT (TOOL_SET_CONFLICT). Run it before
// authorization; the core lists a set's tools and shows a tool as the set
// shows it.
func (s *Core) ToolSets() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, c *Call, emit Emit) (Result, error) {
			if c.Header != nil {
				if v := c.Header.Values(HeaderToolSet); len(v) > 0 {
					if err := setFromHeader(c, v); err != nil {
						return Result{}, err
					}
				}
			}
			if c.Set == "" {
				return next(ctx, c, emit)
			}
			set, ok := s.reg.Snapshot().Set(c.Set)
			if !ok {
				return Result{}, toolSetNotFound(c.Set)
			}
			switch c.Op {
			case OpInvoke, OpStream, OpStartTool, OpGetTool:
				_, tool, ok := set.Lookup(c.Name)
				if !ok {
					return Result{}, toolNotFound(c.Name)
				}
				if tool.Name != c.Name {
					c.Shown, c.Name = c.Name, tool.Name
				}
			}
			return next(ctx, c, emit)
		}
	}
}

// setFromHeader takes the call's set from the values of its tool-set
// metadata: one set, which must be the set the door named, if it named
// one (REST's ?set=, an MCP endpoint's). Empty values name none.
func setFromHeader(c *Call, values []string) error {
	for _, v := range values {
		switch {
		case v == "" || v == c.Set:
		case c.Set == "":
			c.Set = v
		default:
			return ToolSetConflict(fmt.Sprintf("the call names two tool sets, %q and %q (the %s metadata or header): name one", c.Set, v, HeaderToolSet), c.Set, v)
		}
	}
	return nil
}

// ToolSetConflict is the INVALID_ARGUMENT of a call naming two tool sets.
func ToolSetConflict(msg, set, other string) error {
	return gatewayError(codes.InvalidArgument, ReasonToolSetConflict, msg, map[string]string{"tool_set": set, "other_tool_set": other})
}

func toolSetNotFound(name string) error {
	return gatewayError(codes.NotFound, ReasonToolSetNotFound, fmt.Sprintf("tool set %q not found", name), map[string]string{"tool_set": name})
}

// inSet is the set a list or get of c is answered from: nil for the whole
// registry. An unknown set is an error (ToolSets refuses it first).
func inSet(snap *registry.Snapshot, c *Call) (*registry.ToolSet, error) {
	if c.Set == "" {
		return nil, nil
	}
	set, ok := snap.Set(c.Set)
	if !ok {
		return nil, toolSetNotFound(c.Set)
	}
	return set, nil
}
