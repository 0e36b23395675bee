package mcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/mcp"
)

// rpcReply is one JSON-RPC response as the tests read it.
type rpcReply struct {
	Raw    string          `json:"-"`
	ID     json.RawMessage `json:"id"`
	Result map[string]any  `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// post sends body to the endpoint and reads the JSON-RPC response, plain
// JSON or the last message of an event stream.
func post(t *testing.T, url string, header map[string]string, body string) (*http.Response, rpcReply) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	msg := raw
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				msg = []byte(d)
			}
		}
	}
	r := rpcReply{Raw: string(msg)}
	if err := json.Unmarshal(msg, &r); err != nil {
		t.Fatalf("%d %s: body is not a JSON-RPC message: %v\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), err, raw)
	}
	return resp, r
}

// modern is the header of a request of protocol 2026-07-28: its version,
// method, and name (of the tool called) if any.
func modern(method string, name ...string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if len(name) > 0 {
		h["Mcp-Name"] = name[0]
	}
	return h
}

// TestRefusalsAreJSONRPC: every HTTP-level refusal on the endpoint carries
// a JSON-RPC error body with the request's id where it can be read, and a
// protocol version the server does not speak is named as such.
func TestRefusalsAreJSONRPC(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	ping := `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	for _, tc := range []struct {
		name    string
		method  string
		ctype   string
		header  map[string]string
		body    string
		status  int
		code    int64
		id      string
		message string
	}{
		{"GET", http.MethodGet, "", nil, "", http.StatusMethodNotAllowed, -32600, "null", "Method Not Allowed"},
		{"DELETE", http.MethodDelete, "", nil, "", http.StatusMethodNotAllowed, -32600, "null", "Method Not Allowed"},
		{"text/plain", http.MethodPost, "text/plain", nil, ping, http.StatusUnsupportedMediaType, -32600, "7", "application/json"},
		{"malformed JSON", http.MethodPost, "application/json", nil, `{"jsonrpc":"2.0","id":1,"method":`, http.StatusBadRequest, -32700, "null", "malformed"},
		{"foreign Host", http.MethodPost, "application/json", map[string]string{"Host": "evil.example"}, ping, http.StatusForbidden, -32600, "7", "Host"},
		{"unknown protocol version", http.MethodPost, "application/json", map[string]string{"Mcp-Protocol-Version": "banana"}, ping, http.StatusBadRequest, -32022, "7", `"banana" is not a protocol revision this server speaks: it speaks 2026-07-28, 2025-11-25`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, f.url, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var r rpcReply
			if err := json.Unmarshal(raw, &r); err != nil || r.Error == nil {
				t.Fatalf("not a JSON-RPC error: %v\n%s", err, raw)
			}
			if r.Error.Code != tc.code || string(r.ID) != tc.id || !strings.Contains(r.Error.Message, tc.message) {
				t.Errorf("got id %s, error %d %q; want id %s, %d containing %q", r.ID, r.Error.Code, r.Error.Message, tc.id, tc.code, tc.message)
			}
			if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "POST" {
				t.Errorf("Allow %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

// TestResultTypeByEra: from 2026-07-28 on a tools/call result says it is
// complete; before it, through the fast path or the SDK, it carries no
// resultType (as the SDK's own tools' results do not).
func TestResultTypeByEra(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		f := newFixture(t, mcp.Options{NoFastPath: noFast})
		call := func(args string) string {
			return `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}` + args + `}}`
		}
		_, r := post(t, f.url, modern("tools/call", "echo"), call(","+modernMeta))
		if r.Error != nil || r.Result["resultType"] != "complete" {
			t.Errorf("no fast path %v: 2026-07-28 tools/call: %s, want resultType complete", noFast, r.Raw)
		}
		_, r = post(t, f.url, modern("tools/call", "no-such-tool"), `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"no-such-tool",`+modernMeta+`}}`)
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("no fast path %v: 2026-07-28 call of an unknown tool: %s, want error -32602", noFast, r.Raw)
		}
		_, r = post(t, f.url, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, call(""))
		if _, has := r.Result["resultType"]; r.Error != nil || has || r.Result["content"] == nil {
			t.Errorf("no fast path %v: 2025-11-25 tools/call: %s, want a result without resultType", noFast, r.Raw)
		}
	}
}

// TestListCaching: tools/list results of 2026-07-28 carry cacheScope —
// private when the list depends on the caller — and a ttlMs that grows
// with the time since the tool list last changed, up to MaxCacheTTL; the
// order of the tools is the same every time.
func TestListCaching(t *testing.T) {
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + modernMeta + `}}`
	pub := newFixture(t, mcp.Options{MaxCacheTTL: 50 * time.Millisecond})
	priv := newFixture(t, mcp.Options{MaxCacheTTL: time.Hour, CallerDependent: true})
	// The lists age: ttlMs grows to a tenth of that (fails if it does not).
	eventually.True(t, 10*time.Second, "ttlMs grown with the lists' age", func() bool {
		_, r := post(t, priv.url, modern("tools/list"), list)
		ttl, _ := r.Result["ttlMs"].(float64)
		_, r = post(t, pub.url, modern("tools/list"), list)
		return ttl >= 60 && r.Result["ttlMs"] == 50.0
	})
	_, r := post(t, pub.url, modern("tools/list"), list)
	if r.Result["cacheScope"] != "public" || r.Result["ttlMs"] != 50.0 {
		t.Errorf("public list: cacheScope %v ttlMs %v, want public, 50 (the bound)", r.Result["cacheScope"], r.Result["ttlMs"])
	}
	_, r = post(t, priv.url, modern("tools/list"), list)
	ttl, _ := r.Result["ttlMs"].(float64)
	if r.Result["cacheScope"] != "private" || ttl < 60 || ttl > 1000 {
		t.Errorf("private list: cacheScope %v ttlMs %v, want private and about a tenth of the list's age (≥ 60 ms)", r.Result["cacheScope"], r.Result["ttlMs"])
	}
	priv.srv.ToolsChanged()
	_, r = post(t, priv.url, modern("tools/list"), list)
	if ttl2, _ := r.Result["ttlMs"].(float64); ttl2 >= ttl {
		t.Errorf("ttlMs %v right after a change, want less than the %v before it", ttl2, ttl)
	}
	names := func() []string {
		_, r := post(t, pub.url, modern("tools/list"), list)
		var out []string
		for _, tl := range r.Result["tools"].([]any) {
			out = append(out, tl.(map[string]any)["name"].(string))
		}
		return out
	}
	first := names()
	if !slices.IsSorted(first) || len(first) < 3 {
		t.Errorf("tools %v, want them sorted by name", first)
	}
	for range 5 {
		if again := names(); !slices.Equal(again, first) {
			t.Fatalf("tools/list order changed: %v then %v", first, again)
		}
	}
	_, r = post(t, pub.url, modern("server/discover"), `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{`+modernMeta+`}}`)
	if r.Result["cacheScope"] != "public" || r.Result["resultType"] != "complete" {
		t.Errorf("server/discover: %+v, want cacheScope public and resultType complete", r.Result)
	}
}

// TestOnlyToolsServed: the methods of features a gateway of tools does not
// have are unknown methods, in both eras, and neither initialize nor
// server/discover declares them: they declare tools, and logging (the log
// records of tools of MCP content).
func TestOnlyToolsServed(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	for _, m := range []string{"prompts/list", "resources/list", "resources/templates/list", "completion/complete"} {
		_, r := post(t, f.url, modern(m), `{"jsonrpc":"2.0","id":1,"method":"`+m+`","params":{`+modernMeta+`}}`)
		if r.Error == nil || r.Error.Code != -32601 {
			t.Errorf("%s (2026-07-28): %s, want -32601", m, r.Raw)
		}
	}
	_, r := post(t, f.url, modern("server/discover"), `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{`+modernMeta+`}}`)
	caps, _ := r.Result["capabilities"].(map[string]any)
	if len(caps) != 2 || caps["tools"] == nil || caps["logging"] == nil {
		t.Errorf("server/discover capabilities %v, want tools and logging", caps)
	}
	_, r = post(t, f.url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	caps, _ = r.Result["capabilities"].(map[string]any)
	if len(caps) != 2 || caps["tools"] == nil || caps["logging"] == nil {
		t.Errorf("initialize capabilities %v, want tools and logging", caps)
	}
}

// TestCancelledNotification: notifications/cancelled, sent as a POST of
// its own, ends the tools/call it names — the call's context ends, and the
// client gets no result — in both protocol eras, through the fast path and
// the SDK's; a cancellation naming another id changes nothing.
func TestCancelledNotification(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   mcp.Options
		header map[string]string
		meta   string
		// id is the call's, other an id it must not be taken for (the
		// neighbour a float64 would make of it).
		id, other string
	}{
		{"2025-11-25 fast path", mcp.Options{}, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, "", "42", "43"},
		{"2025-11-25 SDK", mcp.Options{NoFastPath: true}, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, "", "42", "43"},
		{"2026-07-28", mcp.Options{}, modern("tools/call", "echo"), "," + modernMeta, "42", "43"},
		{"2025-11-25 fast path, an id past 2^53", mcp.Options{}, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, "", "9007199254740993", "9007199254740992"},
		{"2026-07-28 SDK, a fraction", mcp.Options{NoFastPath: true}, modern("tools/call", "echo"), "," + modernMeta, "1.5", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			done := make(chan string, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(
					`{"jsonrpc":"2.0","id":`+tc.id+`,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"sleep","ms":3000,"msg":"late"}`+tc.meta+`}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				var body []byte
				if resp, err := http.DefaultClient.Do(req); err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				done <- string(body)
			}()
			eventually.True(t, 5*time.Second, "the echo call recorded", func() bool { return f.rec.last().Name == "echo" })
			cancel := func(id string) int {
				req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(
					`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"test"}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if code := cancel(tc.other); code != http.StatusAccepted {
				t.Errorf("notifications/cancelled: HTTP %d, want 202", code)
			}
			select {
			case body := <-done:
				t.Fatalf("the call ended after a cancellation of another id: %s", body)
			case <-time.After(300 * time.Millisecond):
			}
			cancel(tc.id)
			select {
			case <-f.rec.cancelled:
			case <-time.After(2 * time.Second):
				t.Fatal("the call's context did not end after notifications/cancelled")
			}
			// The POST ends with the call, before the 3 s the echo would take.
			select {
			case body := <-done:
				if strings.Contains(body, "late") {
					t.Errorf("the call answered %q; want no result", body)
				}
			case <-time.After(2 * time.Second):
				t.Error("the POST still open after the call's context ended")
			}
		})
	}
}
