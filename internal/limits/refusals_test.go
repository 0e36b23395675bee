package limits

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// heard is a Refusals that keeps what it is told.
type heard struct{ errs []error }

func (h *heard) Refused(err error) { h.errs = append(h.errs, err) }

// TestRefusals: the Refusals in a request's context hears of HTTP's
// refusal of it — once, as the status the doors answer — and of nothing
// for a request within the limits.
func TestRefusals(t *testing.T) {
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.Copy(io.Discard, r.Body) // read again: still one refusal
	})
	h := HTTP(Requests{MaxBodyBytes: 10, BodyTimeout: time.Minute}, nil, read)
	for _, c := range []struct {
		name, body, encoding string
		code                 codes.Code
		reason               string
	}{
		{"within the limits", `{}`, "", codes.OK, ""},
		{"too large", strings.Repeat("x", 100), "", codes.ResourceExhausted, toolcall.ReasonBodyTooLarge},
		{"an encoding not decoded", `{}`, "br", codes.Unimplemented, toolcall.ReasonUnsupportedEncoding},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rs heard
			r := httptest.NewRequest(http.MethodPost, "/v1/tools/echo:invoke", strings.NewReader(c.body))
			r.ContentLength = -1 // as a stream of unknown length arrives
			if c.encoding != "" {
				r.Header.Set("Content-Encoding", c.encoding)
			}
			h.ServeHTTP(httptest.NewRecorder(), r.WithContext(WithRefusals(r.Context(), &rs)))
			if c.code == codes.OK {
				if len(rs.errs) != 0 {
					t.Errorf("heard %v", rs.errs)
				}
				return
			}
			if len(rs.errs) != 1 {
				t.Fatalf("heard %v, want one refusal", rs.errs)
			}
			st := status.Convert(rs.errs[0])
			reason := ""
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					reason = ei.GetReason()
				}
			}
			if st.Code() != c.code || reason != c.reason {
				t.Errorf("heard %s %q, want %s %q", st.Code(), reason, c.code, c.reason)
			}
		})
	}
	if RefusalsOf(httptest.NewRequest(http.MethodGet, "/", nil).Context()) != nil {
		t.Error("a context without Refusals has one")
	}
}
