package app

import (
	"context"
	"errors"
	"slices"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
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

type tagKey struct{}

// The in-process path runs every interceptor, outermost first, with the
// method's full name, and what they put in the context reaches the service.
func TestInProcessRunsTheChain(t *testing.T) {
	var order []string
	tag := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			order = append(order, name+" "+info.FullMethod)
			prev, _ := ctx.Value(tagKey{}).(string)
			return h(context.WithValue(ctx, tagKey{}, prev+name), req)
		}
	}
	f := &fakeTools{}
	p := newInProcess(f, []grpc.UnaryServerInterceptor{tag("a"), tag("b"), tag("c")})
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
	})
	if _, err := p.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: "x"}); !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the interceptor's", err)
	}
	if f.saw != "untouched" {
		t.Errorf("the service ran despite the refusal")
	}
}
