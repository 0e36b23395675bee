package app

import (
	"context"
	"errors"
	"slices"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/grpctest"
	"google.golang.org/grpc"
)

type fakeTools struct {
	toolgatev1.UnimplementedToolServiceServer
	saw string
}

func (f *fakeTools) GetTool(ctx context.Context, r *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	f.saw, _ = ctx.Value(tagKey{}).(string)
	return &toolgatev1.GetToolResponse{Tool: &toolgatev1.Tool{Name: r.GetName()}}, nil
}

func (f *fakeTools) StreamTool(r *toolgatev1.StreamToolRequest, ss grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	f.saw, _ = ss.Context().Value(tagKey{}).(string)
	for i := range 3 {
		if err := ss.Send(&toolgatev1.StreamToolResponse{Output: r.GetName(), Index: int64(i), Last: i == 2}); err != nil {
			return err
		}
	}
	return nil
}

type tagKey struct{}

// tagging is an interceptor that notes its name and the method in order
// and appends its name to the context's tag.
func tagging(order *[]string, name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		*order = append(*order, name+" "+info.FullMethod)
		prev, _ := ctx.Value(tagKey{}).(string)
		return h(context.WithValue(ctx, tagKey{}, prev+name), req)
	}
}

// collect is the receiving end of an in-process stream.
type collect struct {
	grpc.ServerStream
	ctx context.Context
	got []string
}

func (c *collect) Context() context.Context { return c.ctx }
func (c *collect) Send(m *toolgatev1.StreamToolResponse) error {
	c.got = append(c.got, m.GetOutput())
	return nil
}
func (c *collect) SendMsg(m any) error { return c.Send(m.(*toolgatev1.StreamToolResponse)) }

// The in-process path runs every interceptor, outermost first, with the
// method's full name, and what they put in the context reaches the service.
func TestInProcessRunsTheChain(t *testing.T) {
	var order []string
	tag := func(name string) grpc.UnaryServerInterceptor { return tagging(&order, name) }
	f := &fakeTools{}
	p := newInProcess(f, []grpc.UnaryServerInterceptor{tag("a"), tag("b"), tag("c")}, nil)
	resp, err := p.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: "x"})
	if err != nil || resp.GetTool().GetName() != "x" {
		t.Fatalf("GetTool = %v, %v", resp, err)
	}
	m := toolgatev1.ToolService_GetTool_FullMethodName
	if want := []string{"a " + m, "b " + m, "c " + m}; !slices.Equal(order, want) {
		t.Errorf("interceptors ran %q, want %q", order, want)
	}
	if f.saw != "abc" {
		t.Errorf("service saw context tag %q, want \"abc\"", f.saw)
	}
}

// An interceptor that refuses stops the call before the service.
func TestInProcessRefusal(t *testing.T) {
	refused := errors.New("refused")
	f := &fakeTools{saw: "untouched"}
	p := newInProcess(f, []grpc.UnaryServerInterceptor{
		func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { return nil, refused },
	}, nil)
	if _, err := p.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: "x"}); !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the interceptor's", err)
	}
	if f.saw != "untouched" {
		t.Errorf("the service ran despite the refusal")
	}
}

// A streaming call runs the stream chain; the interceptors see the request
// as the first message received, as on gRPC, and may wrap the stream.
func TestInProcessStreamRunsTheChain(t *testing.T) {
	var order []string
	tag := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			order = append(order, name+" "+info.FullMethod)
			prev, _ := ss.Context().Value(tagKey{}).(string)
			return h(srv, &ctxStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), tagKey{}, prev+name)})
		}
	}
	var sawName string
	peek := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &peekStream{ServerStream: ss, saw: &sawName})
	}
	f := &fakeTools{}
	p := newInProcess(f, nil, []grpc.StreamServerInterceptor{tag("a"), tag("b"), peek})
	c := &collect{ctx: t.Context()}
	if err := p.StreamTool(&toolgatev1.StreamToolRequest{Name: "x"}, c); err != nil {
		t.Fatal(err)
	}
	m := toolgatev1.ToolService_StreamTool_FullMethodName
	if want := []string{"a " + m, "b " + m}; !slices.Equal(order, want) {
		t.Errorf("interceptors ran %q, want %q", order, want)
	}
	if sawName != "x" {
		t.Errorf("an interceptor saw request name %q, want x", sawName)
	}
	if f.saw != "ab" || !slices.Equal(c.got, []string{"x", "x", "x"}) {
		t.Errorf("service saw tag %q and sent %q", f.saw, c.got)
	}

	refused := errors.New("refused")
	f2 := &fakeTools{saw: "untouched"}
	p2 := newInProcess(f2, nil, []grpc.StreamServerInterceptor{
		func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error { return refused },
	})
	if err := p2.StreamTool(&toolgatev1.StreamToolRequest{Name: "x"}, &collect{ctx: t.Context()}); !errors.Is(err, refused) || f2.saw != "untouched" {
		t.Fatalf("refused stream: err %v, service saw %q", err, f2.saw)
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

type peekStream struct {
	grpc.ServerStream
	saw *string
}

func (s *peekStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	*s.saw = m.(*toolgatev1.StreamToolRequest).GetName()
	return err
}

func (f *fakeTools) InvokeTool(context.Context, *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return &toolgatev1.InvokeToolResponse{Output: "ok"}, nil
}

// BenchmarkInProcessInvoke is the in-process path's own cost: six
// interceptors that only pass the call on, then the service.
func BenchmarkInProcessInvoke(b *testing.B) {
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	p := newInProcess(&fakeTools{}, []grpc.UnaryServerInterceptor{pass, pass, pass, pass, pass, pass}, nil)
	req := &toolgatev1.InvokeToolRequest{Name: "x"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.InvokeTool(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// Over gRPC, the ToolService's unary methods run their composed chains
// exactly once (the server's interceptor lets them pass), streams run the
// server's stream chain, and other services' calls run the unary chain.
func TestGRPCRunsEachChainOnce(t *testing.T) {
	var order []string
	tag := func(name string) grpc.UnaryServerInterceptor { return tagging(&order, name) }
	streamTag := func(ss any, st grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		order = append(order, "s "+info.FullMethod)
		return h(ss, &contextStream{ServerStream: st, ctx: context.WithValue(st.Context(), tagKey{}, "s")})
	}
	f := &fakeTools{}
	unary := []grpc.UnaryServerInterceptor{tag("a"), tag("b")}
	p := newInProcess(f, unary, []grpc.StreamServerInterceptor{streamTag})
	conn := grpctest.Start(t, grpcService{p}, grpc.UnaryInterceptor(unaryExcept(toolServicePrefix, unary)), grpc.StreamInterceptor(streamTag))
	client := toolgatev1.NewToolServiceClient(conn)

	if _, err := client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"a " + toolgatev1.ToolService_GetTool_FullMethodName, "b " + toolgatev1.ToolService_GetTool_FullMethodName}
	if !slices.Equal(order, want) || f.saw != "ab" {
		t.Fatalf("unary: interceptors ran %q and the service saw %q; want %q and \"ab\"", order, f.saw, want)
	}
	order = nil
	st, err := client.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: "y"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	if want := []string{"s " + toolgatev1.ToolService_StreamTool_FullMethodName}; !slices.Equal(order, want) || f.saw != "s" {
		t.Fatalf("stream: interceptors ran %q and the service saw %q; want %q and \"s\"", order, f.saw, want)
	}
	// Another service's method runs the unary chain through the server's
	// interceptor.
	order = nil
	ran := false
	h := unaryExcept(toolServicePrefix, unary)
	if _, err := h(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}, func(ctx context.Context, _ any) (any, error) {
		ran = ctx.Value(tagKey{}) == "ab"
		return nil, nil
	}); err != nil || !ran || len(order) != 2 {
		t.Fatalf("health: ran %v with %q, err %v", ran, order, err)
	}
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
