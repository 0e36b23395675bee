package connectapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// BenchmarkInvoke is the Connect door's own cost of one unary call, as a
// Connect client with JSON (or binary) bodies makes it (the headers connect-go's
// client sends): request decoding, the call and the response, with a
// handler that answers at once — a text answer as the echo service's, or
// the arguments, JSON, back. httpapi's BenchmarkInvoke is the REST door's.
func BenchmarkInvoke(b *testing.B) {
	const msg = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"
	protoBody, err := proto.Marshal(&toolgatev1.InvokeToolRequest{Name: "echo",
		Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{"msg": structpb.NewStringValue(msg)}}})
	if err != nil {
		b.Fatal(err)
	}
	text := func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: msg}, nil
	}
	for _, bc := range []struct {
		name, body string
		h          toolcall.Handler
		proto      bool
	}{
		{"text", `{"name":"echo","arguments":{"msg":"` + msg + `"}}`, text, false},
		{"proto", string(protoBody), text, true},
		{"json-answer", `{"name":"echo","arguments":{"msg":"x","a":[1,2,3],"b":{"c":"d"}}}`,
			func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
				return toolcall.Result{Output: string(c.Args)}, nil
			}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			path, h := New(bc.h, Options{MaxMessageBytes: 1 << 20, MaxHeaderBytes: 16 << 10})
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, path+"InvokeTool", strings.NewReader(bc.body))
				req.Header.Set("Content-Type", "application/json")
				if bc.proto {
					req.Header.Set("Content-Type", "application/proto")
				}
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
