package httpcall

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHeader(t *testing.T) {
	t.Parallel()
	h := Header(map[string][]string{"Authorization": {"Bearer k"}, "X-Api-Key": {"a"}, "X-Request-Id": {"r"},
		"Traceparent": {"tp"}, "Tracestate": {"ts"}, "Tool-Set": {"s"}, "Mcp-Protocol-Version": {"v"}, "X-Other": {"o"}})
	for key, want := range map[string]string{"authorization": "Bearer k", "x-api-key": "a", "x-request-id": "r",
		"traceparent": "tp", "tracestate": "ts", "tool-set": "s", "mcp-protocol-version": "v", "x-other": "o"} {
		if v := h.Values(key); len(v) != 1 || v[0] != want {
			t.Errorf("%s: %v, want %q", key, v, want)
		}
	}
	if toolcall.NoHeader.Values("authorization") != nil {
		t.Error("NoHeader has values")
	}
}

// ReadBody reads a body whole, whether its length is declared, declared
// wrong, or not declared.
func TestReadBody(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 1000)
	for _, c := range []struct {
		name   string
		length int64
	}{{"declared", 1000}, {"undeclared", -1}, {"declared short", 10}, {"declared long", 5000}, {"larger than presized", maxPresized + 1}} {
		r := httptest.NewRequest(http.MethodPost, "/", iotest.OneByteReader(strings.NewReader(body)))
		r.ContentLength = c.length
		got, err := ReadBody(r)
		if err != nil || string(got) != body {
			t.Errorf("%s: read %d bytes (%v), want %d", c.name, len(got), err, len(body))
		}
	}
}

// BodyError: a body over the limit, one too slow and one that failed
// otherwise each have their status and reason.
func TestBodyError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 10}), codes.ResourceExhausted, toolcall.ReasonBodyTooLarge},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), codes.DeadlineExceeded, toolcall.ReasonBodyTimeout},
		{errors.New("connection reset"), codes.InvalidArgument, toolcall.ReasonInvalidBody},
	} {
		st := status.Convert(BodyError(c.err))
		if st.Code() != c.code || reasonOf(st) != c.reason {
			t.Errorf("%v: %v %q, want %v %q", c.err, st.Code(), reasonOf(st), c.code, c.reason)
		}
	}
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(interface{ GetReason() string }); ok {
			return ei.GetReason()
		}
	}
	return ""
}
