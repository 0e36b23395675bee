package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/grpctest"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stubService answers by tool name:
//
//	echo       the name, or three chunks on a stream
//	fail       UNAVAILABLE with ErrorInfo reason BROKER_UNAVAILABLE
//	bad        INVALID_ARGUMENT
//	cancelled  a bare context.Canceled
//	block      signals entered, then waits for release
//	publish    starts a publish span, injects the trace context into
//	           properties and sends them on props
//	other      NOT_FOUND
type stubService struct {
	toolgatev1.UnimplementedToolServiceServer
	entered chan string
	release chan struct{}
	props   chan map[string]string
}

func newStub() *stubService {
	return &stubService{
		entered: make(chan string, 1),
		release: make(chan struct{}),
		props:   make(chan map[string]string, 1),
	}
}

func (s *stubService) answer(ctx context.Context, name string) error {
	switch name {
	case "echo":
		return nil
	case "fail":
		st, _ := status.New(codes.Unavailable, "tool \"fail\" is unavailable: the message broker cannot be reached").
			WithDetails(&errdetails.ErrorInfo{Reason: "BROKER_UNAVAILABLE", Domain: "toolgate"})
		return st.Err()
	case "bad":
		return status.Error(codes.InvalidArgument, "tool \"bad\": argument \"x\" must be of type number")
	case "cancelled":
		return context.Canceled
	case "block":
		s.entered <- name
		select {
		case <-s.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "publish":
		pctx, end := StartPublishSpan(ctx, "persistent://tg/request/publish")
		props := map[string]string{"id": "c0ffee"}
		InjectTraceparent(pctx, props)
		end(nil)
		s.props <- props
		return nil
	default:
		return status.Errorf(codes.NotFound, "tool %q not found", name)
	}
}

func (s *stubService) InvokeTool(ctx context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	if err := s.answer(ctx, req.GetName()); err != nil {
		return nil, err
	}
	return &toolgatev1.InvokeToolResponse{Output: req.GetName()}, nil
}

func (s *stubService) StreamTool(req *toolgatev1.StreamToolRequest, stream grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	if err := s.answer(stream.Context(), req.GetName()); err != nil {
		return err
	}
	for i := range 3 {
		if err := stream.Send(&toolgatev1.StreamToolResponse{Output: req.GetName(), Index: int64(i), Last: i == 2}); err != nil {
			return err
		}
	}
	return nil
}

// startServer serves the stub (and the health service) in process and
// returns a connection to it.
func startServer(t *testing.T, stub *stubService, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return grpctest.Start(t, stub, opts...)
}

// invoke calls InvokeTool and returns the call's error.
func invoke(ctx context.Context, conn *grpc.ClientConn, name string, opts ...grpc.CallOption) error {
	args, _ := structpb.NewStruct(map[string]any{"secret": "hunter2", "n": 3})
	_, err := toolgatev1.NewToolServiceClient(conn).InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: name, Arguments: args}, opts...)
	return err
}

// stream calls StreamTool, reads it to its end and returns the response
// header and the stream's error (nil for a clean end).
func stream(ctx context.Context, conn *grpc.ClientConn, name string) (metadata.MD, error) {
	args, _ := structpb.NewStruct(map[string]any{"secret": "hunter2"})
	st, err := toolgatev1.NewToolServiceClient(conn).StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: name, Arguments: args})
	if err != nil {
		return nil, err
	}
	for {
		if _, err := st.Recv(); err != nil {
			hdr, _ := st.Header()
			if errors.Is(err, io.EOF) {
				return hdr, nil
			}
			return hdr, err
		}
	}
}

// fakeAuth stands for the auth package: calls need a "user" metadata
// entry (health checks excepted), which it puts into the context.
type fakeAuth struct{}

type fakeUserKey struct{}

func fakeUser(ctx context.Context) string {
	u, _ := ctx.Value(fakeUserKey{}).(string)
	return u
}

func (fakeAuth) authenticate(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if u := md.Get("user"); len(u) > 0 {
		return context.WithValue(ctx, fakeUserKey{}, u[0]), nil
	}
	return nil, status.Error(codes.Unauthenticated, "credentials required")
}

func (a fakeAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

func (a fakeAuth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, ctxStream{ss, ctx})
}

// logBuffer is a goroutine-safe buffer of JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines parses the buffer's JSON lines.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func structpbStruct(m map[string]any) (*structpb.Struct, error) { return structpb.NewStruct(m) }
