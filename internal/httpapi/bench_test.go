package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
)

type benchService struct {
	toolgatev1.UnimplementedToolServiceServer
}

func (benchService) InvokeTool(_ context.Context, r *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	return &toolgatev1.InvokeToolResponse{Output: r.GetArguments().GetFields()["msg"].GetStringValue()}, nil
}

// BenchmarkInvoke is the HTTP side's own cost of one REST call: routing,
// request decoding, the in-process call and the response, with a service
// that answers at once.
func BenchmarkInvoke(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"text", `{"arguments": {"msg": "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"}}`},
		{"json-answer", `{"arguments": {"msg": "{\"a\": [1, 2, 3], \"b\": {\"c\": \"d\"}}"}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := New(context.Background(), Options{Service: benchService{}})
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
