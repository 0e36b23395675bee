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

// ReasonToolSetNotFound is the reason of a call naming a tool set the
// registry does not hold.
const ReasonToolSetNotFound = "TOOL_SET_NOT_FOUND"

// ToolSets resolves the tool set of a call: the set it names (Call.Set,
// else the HeaderToolSet metadata) must exist, and a tool named within it
// (invoke, stream, start, get) must be one the set shows, whose name is
// then replaced by the registry's — so that the policy, the quotas and
// the core see the registry's tool. A tool outside the set is NOT_FOUND,
// as an unknown one. Run it before authorization; the core lists a set's
// tools and shows a tool as the set shows it.
func (s *Core) ToolSets() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, c *Call, emit Emit) (Result, error) {
			if c.Set == "" && c.Header != nil {
				if v := c.Header.Values(HeaderToolSet); len(v) > 0 {
					c.Set = v[0]
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
				c.Name = tool.Name
			}
			return next(ctx, c, emit)
		}
	}
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
