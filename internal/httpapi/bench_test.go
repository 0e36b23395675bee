package httpapi

import (
	"context"
	"github.com/toolgate/toolgate/internal/rootmux"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
)

// echoArgs answers a call with its arguments' text.
func echoArgs(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
	return toolcall.Result{Output: string(c.Args)}, nil
}

// BenchmarkInvoke is the REST door's own cost of one call: routing,
// request decoding, the call and the response, with a handler that answers
// at once.
func BenchmarkInvoke(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"text", `{"arguments": {"msg": "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"}}`},
		{"json-answer", `{"arguments": {"msg": "x", "a": [1, 2, 3], "b": {"c": "d"}}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, err := New(Options{Handler: echoArgs})
			if err != nil {
				b.Fatal(err)
			}
			h, err := rootmux.New(rootmux.Options{Routes: a.Routes()})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/tools/echo:invoke", strings.NewReader(bc.body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
