package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// BenchmarkToolsCall is the MCP door's own cost of one stateless
// tools/call, with a handler that answers at once.
func BenchmarkToolsCall(b *testing.B) {
	h := func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "abcdefghijklmnopqrstuvwxyz012345"}, nil
	}
	srv := mcp.New(h, mcp.Options{})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"abcdefghijklmnopqrstuvwxyz012345"}}}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "abcdefghijklmnopqrstuvwxyz012345") {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}
