package toolcall

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// TestToolSetAnswersNameTheSetsTool: in a set that shows a registry tool
// under another name, everything the caller is told names the set's —
// refused arguments, a deadline passed, an operation started — and never
// the registry's name the set hides; the handlers after ToolSets see the
// registry's name with the set's in Call.Shown.
func TestToolSetAnswersNameTheSetsTool(t *testing.T) {
	t.Parallel()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry+`
tool-set:
  desk: {tools: [{tool: typed, name: desk-tool}, {tool: slow, name: desk-slow}, plain]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := bridge.New(&transporttest.Fake{}, bridge.Options{}) // never answers
	t.Cleanup(b.Close)
	ops := &ownedOps{owners: map[string]string{}, users: map[string]string{}}
	core := New(registry.New(snap), viaBridge(b), Options{Operations: ops})
	var name, shown string
	peek := func(next Handler) Handler {
		return func(ctx context.Context, c *Call, emit Emit) (Result, error) {
			name, shown = c.Name, c.Shown
			return next(ctx, c, emit)
		}
	}
	h := Chain(core.Handle, core.ToolSets(), peek)
	inDesk := func(op Op, tool, args string) *Call {
		return &Call{Op: op, Name: tool, Set: "desk", Args: []byte(args), Header: NoHeader}
	}
	// hides: the message and the ErrorInfo's tool name the set's tool.
	hides := func(what string, err error, hidden string) {
		t.Helper()
		st := status.Convert(err)
		tool := ""
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				tool = ei.GetMetadata()["tool"]
			}
		}
		if err == nil || strings.Contains(st.Message(), `"`+hidden+`"`) || !strings.HasPrefix(tool, "desk-") || !strings.Contains(st.Message(), `"`+tool+`"`) {
			t.Errorf("%s: %v (ErrorInfo tool %q): want the set's name, never %q", what, err, tool, hidden)
		}
	}

	_, err = h(t.Context(), inDesk(OpInvoke, "desk-tool", `{"s": 1}`), nil)
	if reasonOf(err) != ReasonInvalidArguments {
		t.Errorf("desk-tool with a number for s: %v, want INVALID_ARGUMENTS", err)
	}
	hides("refused arguments", err, "typed")
	if name != "typed" || shown != "desk-tool" {
		t.Errorf("after ToolSets: Name %q, Shown %q; want typed, desk-tool", name, shown)
	}

	slow := inDesk(OpInvoke, "desk-slow", `{}`)
	slow.Timeout, slow.TimeoutSet = 20*time.Millisecond, true
	_, err = h(t.Context(), slow, nil)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("desk-slow that never answers: %v, want DEADLINE_EXCEEDED", err)
	}
	hides("a deadline passed", err, "slow")

	res, err := h(t.Context(), inDesk(OpStartTool, "desk-tool", `{"s": "x"}`), nil)
	if err != nil || res.Operation.Tool != "desk-tool" {
		t.Errorf("an operation of desk-tool: %+v, %v; want it to name desk-tool", res.Details().Operation, err)
	}

	// A tool the set shows under its own name is not renamed.
	if _, err := h(t.Context(), inDesk(OpGetTool, "plain", ""), nil); err != nil || name != "plain" || shown != "" {
		t.Errorf("plain in desk: %v; Name %q, Shown %q", err, name, shown)
	}
}

// TestToolSetNamedTwice: a call names one set — by the door (REST's
// ?set=, an MCP endpoint) or the tool-set metadata, or both alike; two
// different ones are INVALID_ARGUMENT, never one of them taken silently.
func TestToolSetNamedTwice(t *testing.T) {
	t.Parallel()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry+`
tool-set:
  desk: {tools: [plain]}
  other: {tools: [typed]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := bridge.New(&transporttest.Fake{}, bridge.Options{})
	t.Cleanup(b.Close)
	core := New(registry.New(snap), viaBridge(b), Options{})
	h := Chain(core.Handle, core.ToolSets())
	for _, tc := range []struct {
		name   string
		set    string
		header []string
		want   string // the reason; "" for served in desk
	}{
		{"the door's set", "desk", nil, ""},
		{"the header's", "", []string{"desk"}, ""},
		{"both alike", "desk", []string{"desk"}, ""},
		{"an empty header", "desk", []string{""}, ""},
		{"the door's and another header", "desk", []string{"other"}, ReasonToolSetConflict},
		{"two headers", "", []string{"desk", "other"}, ReasonToolSetConflict},
		{"the same header twice", "", []string{"desk", "desk"}, ""},
	} {
		c := &Call{Op: OpListTools, Set: tc.set, Header: http.Header{"Tool-Set": tc.header}}
		res, err := h(t.Context(), c, nil)
		switch {
		case tc.want == "" && (err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "plain"):
			t.Errorf("%s: %v, %v; want desk's plain", tc.name, res.Details().Tools, err)
		case tc.want != "" && (status.Code(err) != codes.InvalidArgument || reasonOf(err) != tc.want || !strings.Contains(err.Error(), `"other"`)):
			t.Errorf("%s: %v; want INVALID_ARGUMENT %s naming both sets", tc.name, err, tc.want)
		}
	}
}
