package audit

import (
	"context"
	"crypto/sha256"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// benchArgs are a typical call's arguments.
var benchArgs = []byte(`{"query":"the quarterly revenue of the north-west region","limit":20,"filters":{"year":2026,"lang":"en"}}`)

func benchCall() *toolcall.Call {
	return &toolcall.Call{Op: toolcall.OpInvoke, Name: "search", Args: benchArgs, ArgsCompact: true, Header: toolcall.NoHeader,
		Peer: "10.1.2.3:45678", RequestID: "4f1c0a8e5b7d4e2f9a6c3b1d0e8f7a6b", Authenticated: true,
		Caller: toolcall.Caller{User: "alice", Method: toolcall.SourceAPIKey}}
}

func benchHandler(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
	return toolcall.Result{Output: "a short answer of a tool, some fifty bytes long."}, nil
}

// BenchmarkCall is a call through the audit middleware, its line
// formatted, chained and written to a file: the whole cost of a record,
// the writer's included (the log is closed, all written, within the
// timing). ns/op is both goroutines' time; allocs/op are the call's (the
// writer's buffers are reused).
func BenchmarkCall(b *testing.B) {
	for _, arguments := range []bool{false, true} {
		name := "digest"
		if arguments {
			name = "arguments"
		}
		b.Run(name, func(b *testing.B) {
			l, err := Open(filepath.Join(b.TempDir(), "audit.log"), Options{Queue: b.N + 1, Arguments: arguments})
			if err != nil {
				b.Fatal(err)
			}
			h := toolcall.Chain(benchHandler, l.Middleware())
			c := benchCall()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, _ = h(ctx, c, nil)
			}
			closeLog(b, l)
			b.StopTimer()
			if st := l.Stats(); st.Written != int64(b.N) {
				b.Fatalf("%d written of %d", st.Written, b.N)
			}
		})
	}
}

// BenchmarkWriter is the writer's work for a line under load: formatted,
// chained and written to a file, 64 lines a write.
func BenchmarkWriter(b *testing.B) {
	l := New(Options{Queue: 64})
	out, _, err := openFile(filepath.Join(b.TempDir(), "audit.log"))
	if err != nil {
		b.Fatal(err)
	}
	l.out = out
	defer out.close()
	c := benchCall()
	fill := func(r *record) {
		r.kind, r.start, r.dur, r.requestID, r.door, r.method, r.tool = kindCall, time.Now(), time.Millisecond, c.RequestID, DoorREST, c.MethodName(), c.Name
		r.subject, r.authenticated, r.peer, r.bytesIn, r.bytesOut = c.Caller.Subject(), true, c.Peer, int64(len(benchArgs)), 48
		r.digest, r.hasDigest = ArgumentsDigest(benchArgs), true
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		n := min(64, b.N-i)
		b.StopTimer()
		for range n - 1 {
			r := l.get()
			fill(r)
			l.queue <- r
		}
		r := l.get()
		fill(r)
		b.StartTimer()
		l.batch(r)
	}
}

// BenchmarkCallPath is the audit middleware's cost on the call's own
// goroutine alone (the record filled, the arguments hashed, handed
// over), against the chain without it.
func BenchmarkCallPath(b *testing.B) {
	b.Run("without", func(b *testing.B) {
		h := toolcall.Chain(benchHandler)
		c, ctx := benchCall(), context.Background()
		b.ReportAllocs()
		for range b.N {
			_, _ = h(ctx, c, nil)
		}
	})
	b.Run("with", func(b *testing.B) {
		l := New(Options{Queue: 1 << 16})
		h := toolcall.Chain(benchHandler, l.Middleware())
		c, ctx := benchCall(), context.Background()
		b.ReportAllocs()
		for i := range b.N {
			_, _ = h(ctx, c, nil)
			if i&(1<<15-1) == 1<<15-1 {
				b.StopTimer()
				for len(l.queue) > 0 {
					l.release(<-l.queue)
				}
				b.StartTimer()
			}
		}
	})
}

// BenchmarkLine is the writer's work for one call's line: formatted,
// hashed.
func BenchmarkLine(b *testing.B) {
	c := benchCall()
	r := &record{kind: kindCall, start: time.Now(), dur: 1234 * time.Microsecond, requestID: c.RequestID, door: DoorREST,
		method: c.MethodName(), tool: c.Name, subject: c.Caller.Subject(), authenticated: true, peer: c.Peer,
		bytesIn: int64(len(benchArgs)), bytesOut: 48, digest: ArgumentsDigest(benchArgs), hasDigest: true}
	var buf []byte
	var prev Digest
	b.ReportAllocs()
	for i := range b.N {
		buf = appendLine(buf[:0], r, prev, int64(i))
		prev = sha256.Sum256(buf)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkHTTP is what the audit's HTTP wrapper adds to a request: its
// pending, the request's context, the status kept.
func BenchmarkHTTP(b *testing.B) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	req := httptest.NewRequest(http.MethodPost, "/v1/tools/search:invoke", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer 0123456789abcdef")
	w := httptest.NewRecorder()
	b.Run("without", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			inner.ServeHTTP(w, req)
		}
	})
	b.Run("with", func(b *testing.B) {
		l := New(Options{})
		h := l.HTTP(inner, 64<<10)
		b.ReportAllocs()
		for range b.N {
			h.ServeHTTP(w, req)
		}
	})
}

// echoServer answers InvokeTool at once.
type echoServer struct {
	toolgatev1.UnimplementedToolServiceServer
}

func (echoServer) InvokeTool(context.Context, *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return &toolgatev1.InvokeToolResponse{Output: "ok"}, nil
}

// BenchmarkGRPC is what auditing the gRPC server's services adds to a
// unary call, client and server in one process over loopback: the RPC's
// pending and its message read through it.
func BenchmarkGRPC(b *testing.B) {
	for _, audited := range []bool{false, true} {
		name := "without"
		if audited {
			name = "with"
		}
		b.Run(name, func(b *testing.B) {
			srv := grpc.NewServer()
			var reg grpc.ServiceRegistrar = srv
			if audited {
				reg = New(Options{}).Registrar(srv)
			}
			toolgatev1.RegisterToolServiceServer(reg, echoServer{})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			cli := toolgatev1.NewToolServiceClient(conn)
			req := &toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: string(benchArgs)}
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "0123456789abcdef", "x-request-id", "r-1")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := cli.InvokeTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
