package grpcapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/grpcapi"
	"github.com/toolgate/toolgate/internal/grpctest"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestArguments(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"all types", map[string]any{"s": "x", "n": 1.5, "i": 3.0, "b": true, "o": map[string]any{"k": nil}, "a": []any{1.0, "two"}},
			`{"a":[1,"two"],"b":true,"i":3,"n":1.5,"o":{"k":null},"s":"x"}`},
		{"escapes", map[string]any{"s": "q\"\\\n\t\x01é"}, `{"s":"q\"\\\n\t\u0001é"}`},
		{"large integers stay integers", map[string]any{"n": 1e6}, `{"n":1000000}`},
		{"none", nil, `{}`},
	}
	for _, c := range cases {
		var s *structpb.Struct
		if c.args != nil {
			var err error
			if s, err = structpb.NewStruct(c.args); err != nil {
				t.Fatal(err)
			}
		}
		got, err := apiproto.Arguments(s)
		if err != nil || string(got) != c.want || !json.Valid(got) {
			t.Errorf("%s: %s, %v; want %s", c.name, got, err, c.want)
		}
	}
	nan := &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(math.NaN())}}
	if _, err := apiproto.Arguments(nan); status.Code(err) != codes.InvalidArgument {
		t.Errorf("NaN: %v", err)
	}
	v := structpb.NewStringValue("leaf")
	for range 70 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	deep := &structpb.Struct{Fields: map[string]*structpb.Value{"d": v}}
	if _, err := apiproto.Arguments(deep); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nest deeper") {
		t.Errorf("deep nesting: %v", err)
	}
}

// recorder answers calls and notes what each was.
type recorder struct {
	mu    sync.Mutex
	calls []toolcall.Call
}

func (r *recorder) handle(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, *c)
	r.mu.Unlock()
	c.RequestID = "rid-" + strings.Join(c.Header.Values("x-request-id"), ",")
	tool := &registry.Tool{Name: "t", Service: &registry.Service{ID: "s"}, Schema: map[string]any{"type": "object"}}
	switch c.Op {
	case toolcall.OpInvoke:
		if c.Name == "missing" {
			return toolcall.Result{}, status.Error(codes.NotFound, "no such tool")
		}
		return toolcall.Result{Output: `{"echo": ` + string(c.Args) + `}`}, nil
	case toolcall.OpStream:
		if c.Name == "missing" {
			return toolcall.Result{}, status.Error(codes.NotFound, "no such tool")
		}
		for i := range 3 {
			if err := emit(toolcall.Chunk{Text: string(rune('a' + i)), Index: int64(i), Last: i == 2}); err != nil {
				return toolcall.Result{}, err
			}
		}
		return toolcall.Result{}, nil
	case toolcall.OpListTools:
		return toolcall.Result{Detail: &toolcall.Detail{Tools: []*registry.Tool{tool}, NextPageToken: "next", RegistryVersion: 7}}, nil
	case toolcall.OpGetTool:
		return toolcall.Result{Detail: &toolcall.Detail{Tool: tool, RegistryVersion: 7}}, nil
	case toolcall.OpListServices:
		return toolcall.Result{Detail: &toolcall.Detail{Services: []*registry.Service{tool.Service}}}, nil
	case toolcall.OpGetService:
		return toolcall.Result{Detail: &toolcall.Detail{Service: tool.Service}}, nil
	}
	return toolcall.Result{}, errors.New("unknown op")
}

func (r *recorder) last() toolcall.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[len(r.calls)-1]
}

// Every method becomes the call of its op, with the request's metadata,
// and answers the result, the chunks or the status, and the request id.
func TestService(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	cli := toolgatev1.NewToolServiceClient(grpctest.Start(t, grpcapi.New(rec.handle)))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer k", "x-request-id", "r1")

	args, _ := structpb.NewStruct(map[string]any{"msg": "hi"})
	var hdr metadata.MD
	resp, err := cli.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args, Timeout: durationpb.New(2 * time.Second)}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutput() != `{"echo": {"msg":"hi"}}` || resp.GetOutputJson().GetStructValue() == nil {
		t.Errorf("invoke answer %v", resp)
	}
	if got := hdr.Get("x-request-id"); len(got) != 1 || got[0] != "rid-r1" {
		t.Errorf("x-request-id header %v", got)
	}
	c := rec.last()
	if c.Op != toolcall.OpInvoke || c.Name != "echo" || c.Timeout != 2*time.Second || !c.TimeoutSet ||
		c.Header.Values("authorization")[0] != "Bearer k" || c.PeerName() == "" {
		t.Errorf("call %+v", c)
	}

	if _, err := cli.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "missing"}, grpc.Header(&hdr)); status.Code(err) != codes.NotFound {
		t.Errorf("missing: %v", err)
	}
	if got := hdr.Get("x-request-id"); len(got) != 1 {
		t.Errorf("no request id with an error: %v", hdr)
	}
	if _, err := cli.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", Timeout: &durationpb.Duration{Seconds: -1, Nanos: 5}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed timeout: %v", err)
	}

	st, err := cli.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.GetOutput())
		if m.GetIndex() != int64(len(out)-1) || m.GetLast() != (len(out) == 3) {
			t.Errorf("chunk %v", m)
		}
	}
	if h, _ := st.Header(); strings.Join(out, "") != "abc" || len(h.Get("x-request-id")) != 1 {
		t.Errorf("stream %v, header %v", out, h)
	}
	st, err = cli.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "missing"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("missing stream: %v", err)
	}

	lt, err := cli.ListTools(ctx, &toolgatev1.ListToolsRequest{PageSize: 5, PageToken: "p"})
	if err != nil || len(lt.GetTools()) != 1 || lt.GetNextPageToken() != "next" || lt.GetTools()[0].GetRegistryVersion() != 7 {
		t.Errorf("list tools %v, %v", lt, err)
	}
	if c := rec.last(); c.Op != toolcall.OpListTools || c.PageSize != 5 || c.PageToken != "p" {
		t.Errorf("list call %+v", c)
	}
	if gt, err := cli.GetTool(ctx, &toolgatev1.GetToolRequest{Name: "t"}); err != nil || gt.GetTool().GetName() != "t" {
		t.Errorf("get tool %v, %v", gt, err)
	}
	if ls, err := cli.ListToolServices(ctx, &toolgatev1.ListToolServicesRequest{}); err != nil || len(ls.GetToolServices()) != 1 {
		t.Errorf("list services %v, %v", ls, err)
	}
	if gs, err := cli.GetToolService(ctx, &toolgatev1.GetToolServiceRequest{Id: "s"}); err != nil || gs.GetToolService().GetId() != "s" {
		t.Errorf("get service %v, %v", gs, err)
	}
	if c := rec.last(); c.Op != toolcall.OpGetService || c.Name != "s" {
		t.Errorf("get service call %+v", c)
	}
}
