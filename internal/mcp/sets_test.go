package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// TestSets: each set is served by a server of its own, named as the set
// says, whose calls carry the set; a set that is not there is 404, and a
// set whose title changes gets a server with the new name.
func TestSets(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	info := map[string]mcp.SetInfo{"a": {Title: "Desk A", Instructions: "Use A."}}
	var sets []string
	h := func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		mu.Lock()
		sets = append(sets, c.Set)
		mu.Unlock()
		return toolcall.Result{}, nil
	}
	s := mcp.NewSets(h, func(string) mcp.Options { return mcp.Options{} }, func(set string) (mcp.SetInfo, bool) {
		mu.Lock()
		defer mu.Unlock()
		i, ok := info[set]
		return i, ok
	})
	mux := http.NewServeMux()
	mux.Handle("POST /mcp/{set}", s)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	_, r := post(t, srv.URL+"/mcp/a", nil, initialize)
	if si, _ := r.Result["serverInfo"].(map[string]any); si["name"] != "Desk A" || r.Result["instructions"] != "Use A." {
		t.Fatalf("initialize of set a: %s", r.Raw)
	}
	_, _ = post(t, srv.URL+"/mcp/a", map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`)
	mu.Lock()
	if len(sets) != 1 || sets[0] != "a" {
		t.Errorf("calls made in sets %q, want [a]", sets)
	}
	info["a"] = mcp.SetInfo{Title: "Desk A, renamed"}
	mu.Unlock()
	if _, r := post(t, srv.URL+"/mcp/a", nil, initialize); !strings.Contains(r.Raw, "Desk A, renamed") {
		t.Errorf("after the set's title changed: %s", r.Raw)
	}
	if resp, r := post(t, srv.URL+"/mcp/b", nil, initialize); resp.StatusCode != http.StatusNotFound || r.Error == nil {
		t.Errorf("a set not there: HTTP %d %s, want 404 with a JSON-RPC error", resp.StatusCode, r.Raw)
	}
	s.ToolsChanged() // with one set known: no panic, no lookup of sets gone
}
