package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19 (the propagation tests on Pulsar): a
		// closed producer's send-timeout goroutine only notices the close
		// when its timer (SendTimeout) next fires.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
		// pulsar-client-go v0.21: now and then a connection's goroutines
		// (run loop, reader, ping check) outlive the client's Close in the
		// propagation tests on the real broker, with no test failing — a
		// race inside the client we could not pin down. Our own
		// goroutines are still checked.
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar/internal.(*connection).run"),
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar/internal.(*connection).runPingCheck"),
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar/internal.(*connectionReader).readFromConnection"),
	)
}

// stubService answers calls by tool name, as the core would:
//
//	echo       the name, or three chunks on a stream
//	fail       UNAVAILABLE with ErrorInfo reason BROKER_UNAVAILABLE
//	bad        INVALID_ARGUMENT
//	cancelled  a bare context.Canceled
//	block      signals entered, then waits for release
//	publish    does what the bridge's publish hook does (TracePublish):
//	           starts a publish span, injects the trace
//	           context into the message properties, and sends them on
//	           props
//	other      NOT_FOUND
//
// Ops other than OpInvoke and OpStream are UNIMPLEMENTED.
type stubService struct {
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

// handle is the stub as the last handler of a chain.
func (s *stubService) handle(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	switch c.Op {
	case toolcall.OpInvoke:
		if err := s.answer(ctx, c.Name); err != nil {
			return toolcall.Result{}, err
		}
		return toolcall.Result{Output: c.Name}, nil
	case toolcall.OpStream:
		if err := s.answer(ctx, c.Name); err != nil {
			return toolcall.Result{}, err
		}
		for i := range 3 {
			if err := emit(toolcall.Chunk{Text: c.Name, Index: int64(i), Last: i == 2}); err != nil {
				return toolcall.Result{}, err
			}
		}
		return toolcall.Result{}, nil
	}
	return toolcall.Result{}, status.Errorf(codes.Unimplemented, "method %s not implemented", c.MethodName())
}

// header is a call's Header as an HTTP door builds it, from name/value
// pairs (names in any case, as net/http canonicalizes them).
func header(pairs ...string) toolcall.Header {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("header: odd number of strings %q", pairs))
	}
	h := http.Header{}
	for i := 0; i < len(pairs); i += 2 {
		h.Add(pairs[i], pairs[i+1])
	}
	return httpcall.Header(h)
}

// mdHeader is a call's Header as gRPC metadata holds it: lower-case
// names.
type mdHeader map[string][]string

func (h mdHeader) Values(key string) []string { return h[key] }

// Arguments of the calls invokeCall and streamCall build.
const (
	invokeArgs = `{"secret": "hunter2", "n": 3}`
	streamArgs = `{"secret": "hunter2"}`
)

// invokeCall is the call a door builds for InvokeTool of name.
func invokeCall(name string, h toolcall.Header) *toolcall.Call {
	if h == nil {
		h = toolcall.NoHeader
	}
	return &toolcall.Call{Op: toolcall.OpInvoke, Name: name, Args: []byte(invokeArgs), Header: h}
}

// streamCall is the call a door builds for StreamTool of name.
func streamCall(name string, h toolcall.Header) *toolcall.Call {
	if h == nil {
		h = toolcall.NoHeader
	}
	return &toolcall.Call{Op: toolcall.OpStream, Name: name, Args: []byte(streamArgs), Header: h}
}

// serve runs c through h as a door does, collecting a stream's chunks.
func serve(ctx context.Context, h toolcall.Handler, c *toolcall.Call) (toolcall.Result, []toolcall.Chunk, error) {
	var (
		mu     sync.Mutex
		chunks []toolcall.Chunk
		emit   toolcall.Emit
	)
	if c.Op == toolcall.OpStream {
		emit = func(ch toolcall.Chunk) error {
			mu.Lock()
			defer mu.Unlock()
			chunks = append(chunks, ch)
			return nil
		}
	}
	res, err := h(ctx, c, emit)
	mu.Lock()
	defer mu.Unlock()
	return res, chunks, err
}

// fakeAuth stands for the auth middleware: calls need a "user" header,
// which becomes the call's authenticated caller.
func fakeAuth(next toolcall.Handler) toolcall.Handler {
	return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
		u := c.Header.Values("user")
		if len(u) == 0 || u[0] == "" {
			return toolcall.Result{}, status.Error(codes.Unauthenticated, "credentials required")
		}
		c.Caller = toolcall.Caller{User: u[0], Method: "fake"}
		c.Authenticated = true
		return next(ctx, c, emit)
	}
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
