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
// tools/call, with a handler that answers at once, in each protocol era:
// 2025-11-25 (no version in _meta) and 2026-07-28 (version, method and
// tool name in the header, version and client capabilities in _meta).
func BenchmarkToolsCall(b *testing.B) {
	h := func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "abcdefghijklmnopqrstuvwxyz012345"}, nil
	}
	srv := mcp.New(h, mcp.Options{})
	for _, era := range []struct {
		name, meta string
		header     map[string]string
	}{
		{"2025-11-25", "", map[string]string{"Mcp-Protocol-Version": "2025-11-25"}},
		{"2026-07-28", `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`,
			map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"msg":"abcdefghijklmnopqrstuvwxyz012345"}` + era.meta + `}}`
		b.Run(era.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for k, v := range era.header {
					req.Header.Set(k, v)
				}
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "abcdefghijklmnopqrstuvwxyz012345") {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
