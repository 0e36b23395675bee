package audit

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// door is a door as the gateway's are: it reads the body, then makes a
// call through the chain, or answers without one.
func door(calls toolcall.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/docs":
			_, _ = io.WriteString(w, "a page")
			return
		case "/v1/forbidden":
			w.WriteHeader(http.StatusForbidden) // a refusal no hook tells of
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Args: body, Header: toolcall.NoHeader, Peer: r.RemoteAddr}
		if _, err := calls(r.Context(), c, nil); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// TestHTTP: over the HTTP listener, a call gets one line (naming its
// door), a request the limits refuse before it becomes a call gets one,
// a request refused with 403 by what no hook tells of gets one, and a
// page gets none.
func TestHTTP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	chain := toolcall.Chain(func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		if strings.Contains(string(c.Args), "deny") {
			return toolcall.Result{}, status.Error(codes.Unauthenticated, "no")
		}
		return toolcall.Result{Output: "ok"}, nil
	}, l.Middleware())
	h := l.HTTP(limits.HTTP(limits.Requests{MaxBodyBytes: 100}, nil, door(chain)), 2000)
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(path, body string, header ...string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, body string
		header     []string
		status     int
	}{
		{"/v1/tools/echo:invoke", `{"a":1}`, nil, 200},
		{"/v1/tools/echo:invoke", `{"deny":1}`, []string{"X-Request-Id", "mine-1"}, 401},
		{"/v1/tools/echo:invoke", `{"a":"` + strings.Repeat("x", 200) + `"}`, []string{"X-Request-Id", "mine-2"}, 413},
		{"/mcp", `{}`, []string{"X-Big", strings.Repeat("b", 3000)}, 200}, // the door here does not check; the line does
		{"/v1/tools/echo:invoke", `{}`, []string{"Content-Encoding", "br"}, 413},
		{"/docs", ``, nil, 200},
		{"/v1/forbidden", ``, nil, 403},
		{"/toolgate.v1.ToolService/InvokeTool", `{}`, []string{"Content-Type", "application/grpc-web+proto"}, 200},
	} {
		if got := post(c.path, c.body, c.header...); got != c.status {
			t.Errorf("%s: %d, want %d", c.path, got, c.status)
		}
	}
	closeLog(t, l)
	lines := readLog(t, path)
	type line struct{ door, method, code, reason, id string }
	var got []line
	for _, m := range lines[1 : len(lines)-1] {
		reason, _ := m["reason"].(string)
		got = append(got, line{m["door"].(string), m["method"].(string), m["code"].(string), reason, m["request_id"].(string)})
	}
	want := []line{
		{DoorREST, toolcall.MethodInvoke, "OK", "", ""},
		{DoorREST, toolcall.MethodInvoke, "Unauthenticated", "", ""},
		{DoorREST, "POST /v1/tools/echo:invoke", "ResourceExhausted", toolcall.ReasonBodyTooLarge, "mine-2"},
		{DoorMCP, toolcall.MethodInvoke, "OK", "", ""}, // the chain's line only: the call was made
		{DoorREST, "POST /v1/tools/echo:invoke", "Unimplemented", toolcall.ReasonUnsupportedEncoding, ""},
		{DoorREST, "POST /v1/forbidden", "PermissionDenied", "", ""},
		{DoorGRPCWeb, toolcall.MethodInvoke, "OK", "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i+2, got[i], want[i])
		}
	}
	if _, err := verifyFiles(t, nil, path); err != nil {
		t.Error(err)
	}
}

// TestHTTPHeadersTooLarge: a request whose headers are over the bound,
// which the doors answer 431 before any call, gets its line.
func TestHTTPHeadersTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := l.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	}), 1000)
	req := httptest.NewRequest(http.MethodGet, "/v1/tools", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 2000))
	h.ServeHTTP(httptest.NewRecorder(), req)
	closeLog(t, l)
	lines := readLog(t, path)
	if len(lines) != 3 || lines[1]["reason"] != toolcall.ReasonHeadersTooLarge || lines[1]["method"] != "GET /v1/tools" {
		t.Errorf("lines: %v", lines)
	}
}

// TestAuthenticate: a refusal of MCP's authentication, made before any
// call, gets a line with its code and reason.
func TestAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	authenticate := l.Authenticate(func(context.Context, *toolcall.Call) error {
		return toolcall.GatewayError(codes.Unauthenticated, "INVALID_CREDENTIALS", "no", nil)
	})
	h := l.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authenticate(r.Context(), &toolcall.Call{}) != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}), 0)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")))
	closeLog(t, l)
	lines := readLog(t, path)
	if len(lines) != 3 || lines[1]["door"] != DoorMCP || lines[1]["code"] != "Unauthenticated" || lines[1]["reason"] != "INVALID_CREDENTIALS" {
		t.Errorf("lines: %v", lines)
	}
}

// TestGRPC: the tap's refusals get their lines, its passes none; a call
// whose request message is refused before the door's method runs gets
// one (a client gone, none), and the calls the door's methods make are
// the gRPC door's.
func TestGRPC(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	client := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5555}
	ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "rpc-1")), &peer.Peer{Addr: client})
	tp := l.Tap(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if len(info.Header["x-toolgate-user"]) > 0 {
			return nil, toolcall.GatewayError(codes.Unauthenticated, "RESERVED_METADATA", "no", nil)
		}
		return ctx, nil
	})
	if _, err := tp(ctx, &tap.Info{FullMethodName: toolcall.MethodInvoke, Header: metadata.Pairs("x-toolgate-user", "root", "x-request-id", "tap-1")}); err == nil {
		t.Fatal("the tap took reserved metadata")
	}
	if _, err := tp(ctx, &tap.Info{FullMethodName: toolcall.MethodInvoke, Header: metadata.MD{}}); err != nil {
		t.Fatal(err)
	}

	// A service whose unary method makes a call through the chain.
	chain := toolcall.Chain(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{}, status.Error(codes.ResourceExhausted, "busy")
	}, l.Middleware())
	method := func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(new(int)); err != nil {
			return nil, err
		}
		_, err := chain(ctx, &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Header: toolcall.NoHeader, PeerAddr: client}, nil)
		return nil, err
	}
	var reg fakeRegistrar
	l.Registrar(&reg).RegisterService(&grpc.ServiceDesc{ServiceName: "toolgate.v1.ToolService",
		Methods: []grpc.MethodDesc{{MethodName: "InvokeTool", Handler: method}},
		Streams: []grpc.StreamDesc{{StreamName: "StreamTool", Handler: func(_ any, ss grpc.ServerStream) error { return ss.RecvMsg(new(int)) }, ServerStreams: true}},
	}, nil)
	tooLarge := status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	unary := reg.desc.Methods[0].Handler
	for _, decErr := range []error{tooLarge, nil, status.Error(codes.Canceled, "client gone")} {
		_, _ = unary(nil, ctx, func(any) error { return decErr }, nil)
	}
	_ = reg.desc.Streams[0].Handler(nil, fakeStream{ctx: ctx, err: status.Error(codes.DeadlineExceeded, "context deadline exceeded")})
	closeLog(t, l)
	lines := readLog(t, path)
	if got, want := events(lines), "open call call call call close"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i, want := range []map[string]any{
		{"door": DoorGRPC, "method": toolcall.MethodInvoke, "code": "Unauthenticated", "reason": "RESERVED_METADATA", "request_id": "tap-1", "source": client.String()},
		{"door": DoorGRPC, "method": toolcall.MethodInvoke, "code": "ResourceExhausted", "request_id": "rpc-1", "source": client.String(), "tool": ""},
		{"door": DoorGRPC, "method": toolcall.MethodInvoke, "code": "ResourceExhausted", "tool": "echo", "source": client.String()},
		{"door": DoorGRPC, "method": toolcall.MethodStream, "code": "DeadlineExceeded", "request_id": "rpc-1"},
	} {
		for k, v := range want {
			if lines[i+1][k] != v {
				t.Errorf("line %d: %s = %v, want %v", i+2, k, lines[i+1][k], v)
			}
		}
	}
}

type fakeRegistrar struct{ desc *grpc.ServiceDesc }

func (f *fakeRegistrar) RegisterService(desc *grpc.ServiceDesc, _ any) { f.desc = desc }

// fakeStream is a server stream whose message does not come.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
	err error
}

func (f fakeStream) Context() context.Context { return f.ctx }
func (f fakeStream) RecvMsg(any) error        { return f.err }

// TestStreamBytes: a stream's bytes out are those of the chunks it
// emitted.
func TestStreamBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := toolcall.Chain(func(_ context.Context, _ *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
		for _, s := range []string{"ab", "cde"} {
			if err := emit(toolcall.Chunk{Text: s}); err != nil {
				return toolcall.Result{}, err
			}
		}
		return toolcall.Result{}, nil
	}, l.Middleware())
	if _, err := h(context.Background(), &toolcall.Call{Op: toolcall.OpStream, Name: "s", Args: []byte(`{"n": 2}`), Header: toolcall.NoHeader},
		func(toolcall.Chunk) error { return nil }); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
	if line := readLog(t, path)[1]; line["bytes_out"] != 5.0 || line["bytes_in"] != 8.0 || line["args_sha256"] != ArgumentsDigest([]byte(`{"n":2}`)).String() {
		t.Errorf("line: %v", line)
	}
}

// TestNil: a gateway without --audit runs no middleware or hooks.
func TestNil(t *testing.T) {
	var l *Log
	h := http.NotFoundHandler()
	var reg fakeRegistrar
	if l.Middleware() != nil || l.Registrar(&reg) != &reg || l.Tap(nil) != nil || l.Close(context.Background()) != nil {
		t.Error("a nil log does something")
	}
	if got := l.HTTP(h, 0); got == nil {
		t.Error("a nil log's HTTP is nil")
	}
}
