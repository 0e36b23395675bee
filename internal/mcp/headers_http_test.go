package mcp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/registry"
)

const headerRegistry = `{
  "tool-service": {"echo": {"id": "echo-service", "topic": "echo"}},
  "tool": {"regional": {"type": "tool-service", "service": "echo-service", "input-schema": {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "text": {"type": "string"}},
    "required": ["region"],
    "additionalProperties": false
  }}}
}`

// TestParamHeaders: a tools/call of 2026-07-28 whose Mcp-Param headers do
// not match its arguments is refused at the HTTP level with -32020; one
// that matches reaches the core, which checks the arguments against the
// tool's input schema (a tool error, as for any bad arguments).
func TestParamHeaders(t *testing.T) {
	snap, err := registry.Parse("t.json", []byte(headerRegistry), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newServiceFixture(t, mcp.Options{HeaderParams: func(name string) []registry.HeaderParam {
		if tl, ok := snap.Tool(name); ok {
			return tl.HeaderParams
		}
		return nil
	}}, headerRegistry, echo.Handle)
	call := func(args string) string {
		return `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"regional","arguments":` + args + `,` + modernMeta + `}}`
	}
	withParam := func(v string) map[string]string {
		h := modern("tools/call", "regional")
		h["Mcp-Param-Region"] = v
		return h
	}
	for _, c := range []struct {
		name   string
		header map[string]string
		args   string
	}{
		{"missing", modern("tools/call", "regional"), `{"region": "us-west1"}`},
		{"mismatch", withParam("eu-west1"), `{"region": "us-west1"}`},
		{"malformed base64", withParam("=?base64?SGVsbG8?="), `{"region": "Hello"}`},
	} {
		resp, r := post(t, f.url, c.header, call(c.args))
		if resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32020 || string(r.ID) != "3" {
			t.Errorf("%s: %d %s; want 400 with -32020 for id 3", c.name, resp.StatusCode, r.Raw)
		}
	}
	resp, r := post(t, f.url, withParam("=?base64?SGVsbG8=?="), call(`{"region": "Hello"}`))
	if resp.StatusCode != http.StatusOK || r.Error != nil || r.Result["isError"] == true {
		t.Fatalf("matching headers: %d %s", resp.StatusCode, r.Raw)
	}
	resp, r = post(t, f.url, withParam("us"), call(`{"region": "us", "colour": "red"}`))
	if resp.StatusCode != http.StatusOK || r.Result["isError"] != true || !strings.Contains(r.Raw, `additional properties 'colour' not allowed`) {
		t.Fatalf("arguments against the schema: %d %s; want a tool error naming colour", resp.StatusCode, r.Raw)
	}
	// Before 2026-07-28 clients send no Mcp-Param headers: nothing to check.
	resp, r = post(t, f.url, map[string]string{"Mcp-Protocol-Version": "2025-11-25"},
		`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(r.Raw, `"x-mcp-header":"Region"`) {
		t.Fatalf("tools/list: %d %s; want the schema with its annotation", resp.StatusCode, r.Raw)
	}
}
