package connectapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// BenchmarkInvoke is the Connect door's own cost of one unary call, as a
// Connect client with JSON bodies makes it (the headers connect-go's
// client sends): request decoding, the call and the response, with a
// handler that answers at once — a text answer as the echo service's, or
// the arguments, JSON, back. httpapi's BenchmarkInvoke is the REST door's.
func BenchmarkInvoke(b *testing.B) {
	const msg = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"
	for _, bc := range []struct {
		name, body string
		h          toolcall.Handler
	}{
		{"text", `{"name":"echo","arguments":{"msg":"` + msg + `"}}`,
			func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
				return toolcall.Result{Output: msg}, nil
			}},
		{"json-answer", `{"name":"echo","arguments":{"msg":"x","a":[1,2,3],"b":{"c":"d"}}}`,
			func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
				return toolcall.Result{Output: string(c.Args)}, nil
			}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			path, h := New(bc.h, Options{MaxMessageBytes: 1 << 20, MaxHeaderBytes: 16 << 10})
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, path+"InvokeTool", strings.NewReader(bc.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Connect-Protocol-Version", "1")
				req.Header.Set("Accept-Encoding", "gzip")
				req.Header.Set("Connect-Timeout-Ms", "30000")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
