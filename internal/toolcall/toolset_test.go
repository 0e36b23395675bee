package toolcall

import (
	"context"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestToolSets: in a set, a tool is named as the set shows it, and the
// handlers after ToolSets (the policy's, the core) see the registry's
// name; lists and gets show the set's names; a tool outside the set and
// an unknown set are NOT_FOUND; the set comes from Call.Set or the
// tool-set metadata key.
func TestToolSets(t *testing.T) {
	t.Parallel()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry+`
tool-set:
  desk: {tools: [plain, {tool: typed, name: shown-typed, description: as the desk sees it}]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := bridge.New(&transporttest.Fake{}, bridge.Options{})
	t.Cleanup(b.Close)
	hidden := ""
	core := New(registry.New(snap), viaBridge(b), Options{Visible: func(_ *Call, tool string) bool { return tool != hidden }})
	var seen []string
	peek := func(next Handler) Handler {
		return func(ctx context.Context, c *Call, emit Emit) (Result, error) {
			seen = append(seen, c.Name)
			return next(ctx, c, emit)
		}
	}
	h := Chain(core.Handle, core.ToolSets(), peek)

	res, err := h(t.Context(), &Call{Op: OpGetTool, Name: "shown-typed", Set: "desk", Header: NoHeader}, nil)
	if err != nil || res.Tool.Name != "shown-typed" || res.Tool.Description != "as the desk sees it" || seen[0] != "typed" {
		t.Fatalf("get shown-typed in desk: %+v, %v; the policy saw %q", res.Tool, err, seen)
	}
	res, err = h(t.Context(), &Call{Op: OpListTools, Header: http.Header{"Tool-Set": {"desk"}}}, nil)
	if err != nil || len(res.Tools) != 2 || res.Tools[0].Name != "plain" || res.Tools[1].Name != "shown-typed" {
		t.Fatalf("list in desk by the tool-set header: %v, %v", res.Tools, err)
	}
	hidden = "typed" // the policy hides the registry's typed: the set's list follows
	if res, _ = h(t.Context(), &Call{Op: OpListTools, Set: "desk", Header: NoHeader}, nil); len(res.Tools) != 1 || res.Tools[0].Name != "plain" {
		t.Fatalf("list in desk with typed hidden: %v", res.Tools)
	}
	for _, c := range []*Call{
		{Op: OpInvoke, Name: "typed", Set: "desk"}, // shown under another name
		{Op: OpInvoke, Name: "slow", Set: "desk"},  // not in the set
		{Op: OpStream, Name: "nope", Set: "desk"},
	} {
		c.Header = NoHeader
		if _, err := h(t.Context(), c, nil); status.Code(err) != codes.NotFound || reasonOf(err) != ReasonToolNotFound {
			t.Errorf("%s in desk: %v, want NOT_FOUND TOOL_NOT_FOUND", c.Name, err)
		}
	}
	if _, err := h(t.Context(), &Call{Op: OpListTools, Set: "none", Header: NoHeader}, nil); reasonOf(err) != ReasonToolSetNotFound {
		t.Errorf("an unknown set: %v", err)
	}
}
