package connectapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A status from the core becomes a Connect error with the same code,
// message and details (ErrorInfo, RetryInfo), which Connect and gRPC-Web
// clients read as they are.
func TestConnectError(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "rate limit exceeded").WithDetails(
		&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "toolgate"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var ce *connect.Error
	if !errors.As(connectError(st.Err()), &ce) {
		t.Fatal("not a Connect error")
	}
	if ce.Code() != connect.CodeResourceExhausted || ce.Message() != "rate limit exceeded" || len(ce.Details()) != 2 {
		t.Fatalf("%v %q %d details", ce.Code(), ce.Message(), len(ce.Details()))
	}
	v, err := ce.Details()[0].Value()
	if ei, ok := v.(*errdetails.ErrorInfo); err != nil || !ok || ei.GetReason() != "RATE_LIMITED" {
		t.Fatalf("first detail %v, %v", v, err)
	}
	for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
		var ce *connect.Error
		if !errors.As(connectError(status.Error(code, "x")), &ce) || codes.Code(ce.Code()) != code {
			t.Errorf("%v became %v", code, ce.Code())
		}
	}
	if connect.CodeOf(connectError(errors.New("plain"))) != connect.CodeUnknown {
		t.Error("a plain error is not Unknown")
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// boundedGzip stops one byte past the limit, whatever the compressed
// message would inflate to: connect-go's refusal then costs no more.
func TestBoundedGzip(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zeros := make([]byte, 1<<20)
	for range 16 {
		_, _ = zw.Write(zeros)
	}
	_ = zw.Close()
	const limit = 1000
	src := &countingReader{r: bytes.NewReader(bomb.Bytes())}
	d := &boundedGzip{limit: limit}
	if err := d.Reset(src); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, d)
	if n != limit+1 || !errors.Is(err, errInflated) {
		t.Fatalf("inflated %d bytes, %v; want %d and errInflated", n, err, limit+1)
	}
	if src.n >= int64(bomb.Len()) {
		t.Fatalf("read all %d compressed bytes to inflate %d", src.n, n)
	}
	// Reused from connect-go's pool: the bound starts again.
	if err := d.Reset(bytes.NewReader(bomb.Bytes())); err != nil {
		t.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, d); n != limit+1 {
		t.Fatalf("after Reset: inflated %d bytes, want %d", n, limit+1)
	}
}

// Headers over the limit are refused before connect-go reads the request,
// as a Connect error with the reason.
func TestHeadersTooLarge(t *testing.T) {
	path, h := New(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "ok"}, nil
	}, Options{MaxMessageBytes: 1 << 20, MaxHeaderBytes: 1024})
	req := httptest.NewRequest(http.MethodPost, path+"InvokeTool", strings.NewReader(`{"name": "t"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pad", strings.Repeat("a", 2000))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != "resource_exhausted" ||
		!strings.Contains(body.Message, "more than the 1024") || !strings.Contains(rec.Body.String(), "HEADERS_TOO_LARGE") {
		t.Fatalf("HTTP %d %s, want a resource_exhausted Connect error naming the limit", rec.Code, rec.Body)
	}
}
