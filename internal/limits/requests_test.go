package limits

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHTTPDecompression: a gzip body is read decoded, and its bound counts
// the decoded bytes; a bomb stops at the bound.
func TestHTTPDecompression(t *testing.T) {
	t.Parallel()
	const limit = 1000
	tests := []struct {
		name     string
		body     []byte
		encoding string
		want     string // what the handler reads; "" when it fails
		tooLarge bool
	}{
		{"plain", []byte("hello"), "", "hello", false},
		{"gzip within the bound", gzipped(t, []byte(strings.Repeat("a", limit))), "gzip", strings.Repeat("a", limit), false},
		{"gzip inflating past the bound", gzipped(t, make([]byte, 100*limit)), "gzip", "", true},
		{"gzip, named in capitals", gzipped(t, []byte("hi")), "GZIP", "hi", false},
		{"not gzip", []byte("hello"), "gzip", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []byte
			var readErr error
			var encoding string
			h := HTTP(Requests{MaxBodyBytes: limit}, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				encoding = r.Header.Get("Content-Encoding")
				got, readErr = io.ReadAll(r.Body)
			}))
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			var mbe *http.MaxBytesError
			switch {
			case tc.want != "":
				if readErr != nil || string(got) != tc.want {
					t.Fatalf("read %q, %v; want %q", got, readErr, tc.want)
				}
				if encoding != "" {
					t.Errorf("Content-Encoding %q left for the handler", encoding)
				}
			case tc.tooLarge:
				if !errors.As(readErr, &mbe) || len(got) > limit {
					t.Fatalf("read %d bytes, %v; want at most %d and a MaxBytesError", len(got), readErr, limit)
				}
			default:
				if readErr == nil || errors.As(readErr, &mbe) || !strings.Contains(readErr.Error(), "not valid gzip") {
					t.Fatalf("read error %v, want one saying the body is not gzip", readErr)
				}
			}
		})
	}
}

// TestHTTPBodyTimeout: a body that stops arriving fails its reader with
// an error that says so and is os.ErrDeadlineExceeded, and the answer
// closes the connection; a body that arrives in time is read whole.
func TestHTTPBodyTimeout(t *testing.T) {
	t.Parallel()
	const limit = 200 * time.Millisecond
	readErr := make(chan error, 1)
	srv := httptest.NewServer(HTTP(Requests{BodyTimeout: limit}, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
		}
	})))
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := <-readErr; err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a body in time: HTTP %d, read error %v", resp.StatusCode, err)
	}

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	err = <-readErr
	if !errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != "request body not received within 200ms" {
		t.Fatalf("read error %v, want os.ErrDeadlineExceeded saying the body did not arrive", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a guard against a hang
	raw, _ := io.ReadAll(conn)                                 // to the end: the server closes
	if !bytes.HasPrefix(raw, []byte("HTTP/1.1 408")) || !bytes.Contains(raw, []byte("Connection: close")) {
		t.Fatalf("answer %q, want 408 with Connection: close", raw)
	}
}

// grpcServer serves gRPC health under q's limits, with the tap and
// options the gateway uses.
func grpcServer(t *testing.T, q Requests) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(GRPCServerOptions(q), grpc.InTapHandle(GRPCTap(q, nil, nil)))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestGRPCMetadata: metadata over the bound are refused before the call
// with RESOURCE_EXHAUSTED and the reason; within it they pass.
func TestGRPCMetadata(t *testing.T) {
	t.Parallel()
	cli := grpcServer(t, Requests{MaxHeaderBytes: 4096})
	for _, tc := range []struct {
		name string
		pad  int
		code codes.Code
	}{{"within", 1000, codes.OK}, {"over", 5000, codes.ResourceExhausted}} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-pad", strings.Repeat("a", tc.pad))
		_, err := cli.Check(ctx, &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		if st.Code() != tc.code {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if tc.code == codes.OK {
			continue
		}
		var reason string
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				reason = ei.GetReason()
			}
		}
		if reason != toolcall.ReasonHeadersTooLarge || !strings.Contains(st.Message(), "more than the 4096") {
			t.Fatalf("%s: %v, want reason %s", tc.name, err, toolcall.ReasonHeadersTooLarge)
		}
	}
}

// TestBodyClock: a call whose message does not come in time ends with
// DEADLINE_EXCEEDED (the context says so); once it came, the clock stops
// and the call's context lives on.
func TestBodyClock(t *testing.T) {
	t.Parallel()
	logged := &lockedBuffer{}
	c := startBodyClock(context.Background(), time.Millisecond, slog.New(slog.NewTextHandler(logged, nil)), "/m")
	<-c.Done()
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, want DeadlineExceeded", c.Err())
	}
	if c.Value(bodyClockKey{}) != c {
		t.Fatal("the clock is not found in its context")
	}
	eventually.True(t, 10*time.Second, "the cause logged", func() bool {
		return strings.Contains(logged.String(), "request message not received in time")
	})

	c = startBodyClock(context.Background(), time.Hour, slog.New(slog.DiscardHandler), "/m")
	c.timer.Stop()
	if c.Err() != nil {
		t.Fatalf("Err %v after the message came", c.Err())
	}

	// Through a server: a health check has its message at once.
	cli := grpcServer(t, Requests{BodyTimeout: time.Minute})
	if _, err := cli.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := cli.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("a server stream: %v", err)
	}
}

// BenchmarkGRPCTap is what the tap and the interceptor add to a gRPC
// call: with a body clock (a call without a deadline of its own), and
// without (body timeout off), against the context a call has anyway.
func BenchmarkGRPCTap(b *testing.B) {
	info := &tap.Info{FullMethodName: "/toolgate.v1.ToolService/InvokeTool", Header: metadata.MD{"content-type": {"application/grpc"}}}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, bc := range []struct {
		name string
		d    time.Duration
	}{{"clock", DefaultBodyTimeout}, {"no clock", -1}} {
		tapHandle := GRPCTap(Requests{BodyTimeout: bc.d}, nil, nil)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				ctx, _ = tapHandle(ctx, info)
				_, _ = stopClockUnary(ctx, nil, nil, handler)
				cancel()
			}
		})
	}
}

// lockedBuffer is a log written by one goroutine and read by another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHTTP2BodyTimeout: on HTTP/2 a body that stops arriving fails its
// reader in the same words, from the gateway's own timer, and a body
// that arrives in time is read whole on the same connection.
func TestHTTP2BodyTimeout(t *testing.T) {
	t.Parallel()
	const limit = 200 * time.Millisecond
	readErr := make(chan error, 1)
	srv := httptest.NewUnstartedServer(HTTP(Requests{BodyTimeout: limit}, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
		}
	})))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cli := srv.Client()

	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, "{") }() // then nothing more
	resp, err := cli.Post(srv.URL, "application/json", pr)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	err = <-readErr
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a body cut short: %s %d, want HTTP/2 408", resp.Proto, resp.StatusCode)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != "request body not received within 200ms" {
		t.Fatalf("read error %v, want os.ErrDeadlineExceeded saying the body did not arrive", err)
	}

	resp, err = cli.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := <-readErr; err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a body in time: HTTP %d, read error %v", resp.StatusCode, err)
	}
}
