package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fixedHandler answers by tool name, the same every time; a stream is its
// output as one chunk.
func fixedHandler(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	res, err := fixedAnswer(ctx, c)
	if err != nil || emit == nil {
		return res, err
	}
	return toolcall.Result{}, emit(toolcall.Chunk{Text: res.Output, Last: true})
}

// fixedResult is the result format of fixedHandler's tools: those named
// content… answer with MCP content.
func fixedResult(tool string) string {
	if strings.HasPrefix(tool, "content") {
		return registry.ResultMCPContent
	}
	return registry.ResultText
}

func fixedAnswer(_ context.Context, c *toolcall.Call) (toolcall.Result, error) {
	if c.ArgsCompact {
		// The core would take these without reading them again: they must
		// be what jsontext.Compact makes of them, or the fast path's answer
		// differs from the SDK's (FuzzFastPath).
		if again, err := jsontext.Compact(c.Args); len(c.Args) > 0 && (err != nil || !bytes.Equal(again, c.Args)) {
			return toolcall.Result{}, status.Errorf(codes.Internal, "arguments %q marked compact: %q, %v", c.Args, again, err)
		}
	}
	switch c.Name {
	case "content":
		return toolcall.Result{Output: `{"log":{"level":"info","data":"x"}}[{"type":"text","text":"t"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]`}, nil
	case "content-bad":
		return toolcall.Result{Output: `[{"type":"image","mimeType":"image/png"}]`}, nil
	case "json":
		return toolcall.Result{Output: `{"a": [1, 2.50, "x"], "big": 123456789012345678}`}, nil
	case "text":
		return toolcall.Result{Output: "plain text with \"quotes\" and \u00e9 " + string(c.Args)}, nil
	case "missing":
		st, _ := status.New(codes.NotFound, `tool "missing" not found`).WithDetails(&errdetails.ErrorInfo{Reason: "TOOL_NOT_FOUND", Domain: "toolgate"})
		return toolcall.Result{}, st.Err()
	case "denied":
		return toolcall.Result{}, status.Error(codes.PermissionDenied, "permission denied")
	case "fails":
		st, _ := status.New(codes.Unavailable, "gone").WithDetails(&errdetails.ErrorInfo{Reason: "unavailable", Domain: "toolgate"})
		return toolcall.Result{}, st.Err()
	case "bad-args":
		return toolcall.Result{}, status.Error(codes.InvalidArgument, `tool "bad-args": missing required argument "s"`)
	case "plain-error":
		return toolcall.Result{}, errors.New("not a status")
	case "timeout":
		return toolcall.Result{Output: c.Timeout.String()}, nil
	}
	return toolcall.Result{Output: "echo:" + c.Name}, nil
}

// answer is one response as a client reads it.
type answer struct {
	code        int
	contentType string
	message     any // the JSON-RPC message, decoded
	raw         string
}

func post(t *testing.T, h http.Handler, body string, header map[string]string) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	setHeader(req.Header, header)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	a := answer{code: w.Code, contentType: w.Header().Get("Content-Type"), raw: w.Body.String()}
	if a.contentType == "application/json" {
		// A refusal as a JSON-RPC error, with an HTTP status of its own.
		d := json.NewDecoder(strings.NewReader(a.raw))
		d.UseNumber()
		if err := d.Decode(&a.message); err != nil {
			t.Fatalf("JSON body %q: %v", a.raw, err)
		}
		return a
	}
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			d := json.NewDecoder(strings.NewReader(data))
			d.UseNumber()
			if err := d.Decode(&a.message); err != nil {
				t.Fatalf("event data %q: %v", data, err)
			}
		}
	}
	return a
}

// setHeader sets each field of header in h; a value with newlines is that
// many values of the field, an empty one removes the field.
func setHeader(h http.Header, header map[string]string) {
	for k, v := range header {
		h.Del(k)
		for _, part := range strings.Split(v, "\n") {
			if v != "" {
				h.Add(k, part)
			}
		}
	}
}

// modernMeta is the _meta a client of protocol 2026-07-28 sends, with more
// members if given.
func modernMeta(more string) string {
	return `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}` + more + `}`
}

// modernHeader is the header of a 2026-07-28 tools/call of the tool name.
func modernHeader(name string) map[string]string {
	return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
}

// with is h with more fields (newlines: several values; "": removed).
func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// deep is a JSON value nested n arrays deep.
func deep(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }

var fastCases = []struct {
	name   string
	body   string
	header map[string]string
	fast   bool // the fast path answers it
}{
	{"JSON output", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"json","arguments":{"msg":"x"}}}`, nil, true},
	{"text output", `{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"text","arguments":{"n":12345678901234567890}}}`, nil, true},
	{"id past 64 bits", `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"text"}}`, nil, true},
	{"fraction id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"text"}}`, nil, true},
	{"negative id", `{"jsonrpc":"2.0","id":-7,"method":"tools/call","params":{"name":"echo","arguments":null}}`, nil, true},
	{"unknown tool", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"missing"}}`, nil, true},
	{"denied", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"denied"}}`, nil, true},
	{"service error", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fails"}}`, nil, true},
	{"bad arguments", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bad-args","arguments":{}}}`, nil, true},
	{"plain error", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"plain-error"}}`, nil, true},
	{"arguments not an object", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`, nil, true},
	{"no name", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"arguments":{}}}`, nil, true},
	{"timeout", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"timeout","_meta":{"timeout":"1.5s"}}}`, nil, true},
	{"bad timeout", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"timeout","_meta":{"timeout":"banana"}}}`, nil, true},
	{"protocol 2025-06-18", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Mcp-Protocol-Version": "2025-06-18"}, true},
	{"protocol 2025-11-25", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, true},
	// Not taken: the SDK answers these.
	{"MCP content: log records at info", `{"jsonrpc":"2.0","id":26,"method":"tools/call","params":{"name":"content"}}`, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, false},
	{"malformed MCP content", `{"jsonrpc":"2.0","id":27,"method":"tools/call","params":{"name":"content-bad"}}`, nil, false},
	{"progress token", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"json","_meta":{"progressToken":1}}}`, nil, false},
	{"tools/list", `{"jsonrpc":"2.0","id":14,"method":"tools/list"}`, nil, false},
	{"notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"json"}}`, nil, false},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"json"}}`, nil, false},
	{"extra member", `{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"json","task":{}}}`, nil, false},
	{"newest protocol", `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, false},
	{"unknown protocol", `{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Mcp-Protocol-Version": "banana"}, false},
	{"wrong jsonrpc", `{"jsonrpc":"1.0","id":19,"method":"tools/call","params":{"name":"json"}}`, nil, false},
	{"form body", `name=json`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, false},
	{"only JSON accepted", `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Accept": "application/json"}, false},
	{"Last-Event-ID", `{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"json"}}`, map[string]string{"Last-Event-ID": "x_1"}, false},
	{"deep arguments", `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"json","arguments":{"a":` + deep(1000) + `}}}`, nil, false},
	{"somewhat deep arguments", `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"json","arguments":{"a":` + deep(100) + `}}}`, nil, false},
	{"_meta protocol version, legacy header", `{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}, false},
	{"_meta protocol version, no header", `{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, nil, false},

	// Protocol 2026-07-28.
	{"2026 JSON output", `{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"json","arguments":{"msg":"x"},` + modernMeta("") + `}}`, modernHeader("json"), true},
	{"2026 text output", `{"jsonrpc":"2.0","id":"m1","method":"tools/call","params":{"name":"text","arguments":{"n":1},` + modernMeta("") + `}}`, modernHeader("text"), true},
	{"2026 unknown tool", `{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"missing",` + modernMeta("") + `}}`, modernHeader("missing"), true},
	{"2026 denied", `{"jsonrpc":"2.0","id":102,"method":"tools/call","params":{"name":"denied",` + modernMeta("") + `}}`, modernHeader("denied"), true},
	{"2026 service error", `{"jsonrpc":"2.0","id":103,"method":"tools/call","params":{"name":"fails",` + modernMeta("") + `}}`, modernHeader("fails"), true},
	{"2026 bad arguments", `{"jsonrpc":"2.0","id":104,"method":"tools/call","params":{"name":"bad-args","arguments":{},` + modernMeta("") + `}}`, modernHeader("bad-args"), true},
	{"2026 arguments not an object", `{"jsonrpc":"2.0","id":105,"method":"tools/call","params":{"name":"echo","arguments":"x",` + modernMeta("") + `}}`, modernHeader("echo"), true},
	{"2026 timeout", `{"jsonrpc":"2.0","id":106,"method":"tools/call","params":{"name":"timeout",` + modernMeta(`,"timeout":2`) + `}}`, modernHeader("timeout"), true},
	{"2026 bad timeout", `{"jsonrpc":"2.0","id":107,"method":"tools/call","params":{"name":"timeout",` + modernMeta(`,"timeout":"x"`) + `}}`, modernHeader("timeout"), true},
	{"2026 client info and log level", `{"jsonrpc":"2.0","id":108,"method":"tools/call","params":{"name":"json",` +
		modernMeta(`,"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"debug"`) + `}}`, modernHeader("json"), true},
	{"2026 capabilities", `{"jsonrpc":"2.0","id":109,"method":"tools/call","params":{"name":"json","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{}},"extensions":{"x/y":{}},"experimental":{"z":1},"Roots":5}}}}`, modernHeader("json"), true},
	{"2026 trace context", `{"jsonrpc":"2.0","id":110,"method":"tools/call","params":{"name":"json",` +
		modernMeta(`,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`) + `}}`, modernHeader("json"), true},
	{"2026 name twice", `{"jsonrpc":"2.0","id":111,"method":"tools/call","params":{"name":"text","name":"json",` + modernMeta("") + `}}`, modernHeader("json"), false}, // a key repeated: the SDK's
	{"2026 _meta twice", `{"jsonrpc":"2.0","id":112,"method":"tools/call","params":{"name":"json","_meta":{},` + modernMeta("") + `}}`, modernHeader("json"), false},
	{"2026 MCP content", `{"jsonrpc":"2.0","id":114,"method":"tools/call","params":{"name":"content",` + modernMeta("") + `}}`, modernHeader("content"), true},
	{"2026 malformed MCP content", `{"jsonrpc":"2.0","id":115,"method":"tools/call","params":{"name":"content-bad",` + modernMeta("") + `}}`, modernHeader("content-bad"), true},
	{"2026 MCP content, a log level that is none", `{"jsonrpc":"2.0","id":116,"method":"tools/call","params":{"name":"content",` +
		modernMeta(`,"io.modelcontextprotocol/logLevel":"loud"`) + `}}`, modernHeader("content"), true},
	{"2026 escaped name", `{"jsonrpc":"2.0","id":113,"method":"tools/call","params":{"name":"\u006a\u0073on",` + modernMeta("") + `}}`, modernHeader("json"), true},
	// Not taken: the SDK checks and refuses these, or streams.
	{"2026 no Mcp-Method", `{"jsonrpc":"2.0","id":120,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, with(modernHeader("json"), "Mcp-Method", ""), false},
	{"2026 other Mcp-Method", `{"jsonrpc":"2.0","id":121,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, with(modernHeader("json"), "Mcp-Method", "tools/list"), false},
	{"2026 two Mcp-Method", `{"jsonrpc":"2.0","id":122,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, with(modernHeader("json"), "Mcp-Method", "tools/call\ntools/list"), false},
	{"2026 no Mcp-Name", `{"jsonrpc":"2.0","id":123,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, with(modernHeader("json"), "Mcp-Name", ""), false},
	{"2026 other Mcp-Name", `{"jsonrpc":"2.0","id":124,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`, modernHeader("JSON"), false},
	{"2026 no name", `{"jsonrpc":"2.0","id":125,"method":"tools/call","params":{` + modernMeta("") + `}}`, modernHeader(""), false},
	{"2026 no _meta", `{"jsonrpc":"2.0","id":126,"method":"tools/call","params":{"name":"json"}}`, modernHeader("json"), false},
	{"2026 _meta of another version", `{"jsonrpc":"2.0","id":127,"method":"tools/call","params":{"name":"json","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}}}`, modernHeader("json"), false},
	{"2026 no capabilities", `{"jsonrpc":"2.0","id":128,"method":"tools/call","params":{"name":"json","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, modernHeader("json"), false},
	{"2026 capabilities not an object", `{"jsonrpc":"2.0","id":129,"method":"tools/call","params":{"name":"json","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}}}`, modernHeader("json"), false},
	{"2026 capabilities of the wrong shape", `{"jsonrpc":"2.0","id":130,"method":"tools/call","params":{"name":"json","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":5}}}}`, modernHeader("json"), false},
	{"2026 client info null", `{"jsonrpc":"2.0","id":131,"method":"tools/call","params":{"name":"json",` + modernMeta(`,"io.modelcontextprotocol/clientInfo":null`) + `}}`, modernHeader("json"), false},
	{"2026 client info of the wrong shape", `{"jsonrpc":"2.0","id":132,"method":"tools/call","params":{"name":"json",` + modernMeta(`,"io.modelcontextprotocol/clientInfo":{"name":5}`) + `}}`, modernHeader("json"), false},
	{"2026 progress token", `{"jsonrpc":"2.0","id":133,"method":"tools/call","params":{"name":"json",` + modernMeta(`,"progressToken":"p"`) + `}}`, modernHeader("json"), false},
	{"2026 request state", `{"jsonrpc":"2.0","id":134,"method":"tools/call","params":{"name":"json","requestState":"s",` + modernMeta("") + `}}`, modernHeader("json"), false},
	{"2026 MCP content with a log level", `{"jsonrpc":"2.0","id":136,"method":"tools/call","params":{"name":"content",` +
		modernMeta(`,"io.modelcontextprotocol/logLevel":"info"`) + `}}`, modernHeader("content"), false},
	{"2026 tools/list", `{"jsonrpc":"2.0","id":135,"method":"tools/list","params":{` + modernMeta("") + `}}`, with(modernHeader(""), "Mcp-Method", "tools/list"), false},
}

// TestFastPathMatchesSDK sends each request over HTTP to the endpoint with
// and without the fast path and wants the same answer on the wire — the
// status, every header (Date and Mcp-Session-Id normalised), the event
// stream's framing byte for byte and the JSON-RPC message (parity_test.go)
// — and the fast path to take what it should: the fast path's cases, and
// the transport's (DNS rebinding, Accept, Content-Type, Last-Event-ID).
func TestFastPathMatchesSDK(t *testing.T) {
	t.Parallel()
	fast, sdkOnly, fastSrv := parityServers(t)
	for _, c := range fastCases {
		t.Run(c.name, func(t *testing.T) {
			got, want := roundTrip(t, fast, c.body, c.header, "", nil), roundTrip(t, sdkOnly, c.body, c.header, "", nil)
			if d := answerDiff(got, want); d != "" {
				t.Errorf("%s\nfast path:\n%s\nSDK:\n%s", d, got, want)
			}
			if taken := takenFast(fastSrv, c.body, c.header, "", nil); taken != c.fast {
				t.Errorf("fast path taken: %v, want %v", taken, c.fast)
			}
		})
	}
	for _, c := range transportCases {
		t.Run(c.name, func(t *testing.T) {
			got, want := roundTrip(t, fast, plainCall, c.header, c.host, c.local), roundTrip(t, sdkOnly, plainCall, c.header, c.host, c.local)
			if d := answerDiff(got, want); d != "" {
				t.Errorf("%s\nfast path:\n%s\nSDK:\n%s", d, got, want)
			}
			if taken := takenFast(fastSrv, plainCall, c.header, c.host, c.local); taken != c.fast {
				t.Errorf("fast path taken: %v, want %v", taken, c.fast)
			}
		})
	}
}

// FuzzFastPath: for any tools/call body and MCP header (protocol version,
// method, tool name; newlines separate values of a field), the fast path
// answers as the SDK does — status, every header, framing and message —
// or leaves the request to it.
func FuzzFastPath(f *testing.F) {
	for _, c := range fastCases {
		f.Add(c.body, c.header["Mcp-Protocol-Version"], c.header["Mcp-Method"], c.header["Mcp-Name"])
	}
	fast := New(fixedHandler, Options{Result: fixedResult})
	sdkOnly := New(fixedHandler, Options{NoFastPath: true, Result: fixedResult})
	f.Fuzz(func(t *testing.T, body, version, method, name string) {
		header := map[string]string{"Mcp-Protocol-Version": version, "Mcp-Method": method, "Mcp-Name": name}
		got, want := record(fast, body, header, "", nil), record(sdkOnly, body, header, "", nil)
		if d := answerDiff(got, want); d != "" {
			t.Fatalf("%q %q: %s\nfast path:\n%s\nSDK:\n%s", body, header, d, got, want)
		}
	})
}

// FuzzFastPathTransport: for any Accept, Content-Type, Host, listener
// address and Last-Event-ID ("": none), a tools/call is answered by the
// fast path as the SDK answers it, or left to it.
func FuzzFastPathTransport(f *testing.F) {
	for _, c := range transportCases {
		local := ""
		if c.local != nil {
			local = localAddrValue(c.local)
		}
		f.Add(c.header["Accept"], c.header["Content-Type"], c.host, local, c.header["Last-Event-Id"])
	}
	fast := New(fixedHandler, Options{Result: fixedResult})
	sdkOnly := New(fixedHandler, Options{NoFastPath: true, Result: fixedResult})
	f.Fuzz(func(t *testing.T, accept, contentType, host, local, lastEventID string) {
		header := map[string]string{"Accept": accept, "Content-Type": contentType, "Last-Event-Id": lastEventID}
		addr := parseLocalAddr(local)
		got, want := record(fast, plainCall, header, host, addr), record(sdkOnly, plainCall, header, host, addr)
		if d := answerDiff(got, want); d != "" {
			t.Fatalf("%q Host %q local %q: %s\nfast path:\n%s\nSDK:\n%s", header, host, local, d, got, want)
		}
	})
}

// A page on another site may not drive the endpoint (DNS rebinding,
// cross-site requests); the endpoint's own origin, listed origins and
// requests without Origin may. Batches are refused whole.
func TestOriginsAndBatches(t *testing.T) {
	t.Parallel()
	srv := New(fixedHandler, Options{AllowedOrigins: []string{"https://app.example.com"}})
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"json"}}`
	for _, c := range []struct {
		origin string
		code   int
	}{
		{"", http.StatusOK},
		{"http://example.com", http.StatusOK}, // httptest's Host
		{"https://app.example.com", http.StatusOK},
		{"http://evil.com", http.StatusForbidden},
		{"null", http.StatusForbidden},
		{"http://example.com.evil.com", http.StatusForbidden},
	} {
		header := map[string]string{}
		if c.origin != "" {
			header["Origin"] = c.origin
		}
		a := post(t, srv, call, header)
		if a.code != c.code {
			t.Errorf("Origin %q: HTTP %d %s, want %d", c.origin, a.code, a.raw, c.code)
		}
		if c.code == http.StatusForbidden && (a.contentType != "application/json" || !strings.Contains(a.raw, `"code":-32600`)) {
			t.Errorf("Origin %q: refusal %s %s is not a JSON-RPC error", c.origin, a.contentType, a.raw)
		}
	}
	a := post(t, srv, " ["+call+","+call+"]", nil)
	if a.code != http.StatusBadRequest || a.contentType != "application/json" || !strings.Contains(a.raw, "batches are not supported") {
		t.Errorf("batch: HTTP %d %s %s", a.code, a.contentType, a.raw)
	}
}

// The fast path writes a text result itself: it must decode to what the
// SDK's encoding of the same result decodes to, in both protocol eras.
func TestFastTextResultAsTheSDKWritesIt(t *testing.T) {
	t.Parallel()
	s := New(fixedHandler, Options{Version: "1.2.3"})
	for _, text := range []string{"", "plain", " {\"a\": [1, 2.50, \"<&>\"]} ", "{not json", "[1,2]", "\"quoted\"\n\t\\", "bad utf-8 \xff\xfe", "\u2028\u2029 \x00\x1f"} {
		for _, modern := range []bool{false, true} {
			checkTextResult(t, s, text, modern)
		}
	}
}

// FuzzFastTextResult: the same for any text.
func FuzzFastTextResult(f *testing.F) {
	for _, text := range []string{"", "x", `{"a":1}`, " { \"b\" : 1e400 } ", "\xff", deepObject(64), deepObject(65)} {
		f.Add(text, false)
		f.Add(text, true)
	}
	s := New(fixedHandler, Options{})
	f.Fuzz(func(t *testing.T, text string, modern bool) { checkTextResult(t, s, text, modern) })
}

func checkTextResult(t *testing.T, s *Server, text string, modern bool) {
	t.Helper()
	res := result(text)
	if modern {
		res = complete(res)
		res.Meta = map[string]any{"io.modelcontextprotocol/serverInfo": s.impl}
	}
	want, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	got := s.appendTextResult(nil, text, modern)
	decode := func(b []byte) any {
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil || d.More() {
			t.Fatalf("%q (modern %v): not one JSON value: %s (%v)", text, modern, b, err)
		}
		return v
	}
	if g, w := decode(got), decode(want); !reflect.DeepEqual(g, w) {
		t.Errorf("%q (modern %v):\n fast path %s\n SDK       %s", text, modern, got, want)
	}
}

// FuzzDecodeMeta: the fast path's reading of _meta is encoding/json's.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []string{`{}`, `{"a":"b","n":-1.5e3,"t":true,"f":false,"z":null,"o":{},"p":{"x":[1,"\u00e9"]}}`,
		`{"k\u0065y":1}`, `{"s":"a\"b"}`, `{"big":1e400}`, `{"x":"\xff"}`, `[1]`, `{"a":1,"a":2}`} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		compact, err := jsontext.Compact([]byte(meta))
		if err != nil {
			return // the fast path reads _meta only from a body jsontext took
		}
		got, ok := decodeMeta(compact)
		var want map[string]any
		werr := json.Unmarshal(compact, &want)
		if ok != (werr == nil) || (ok && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: decodeMeta %v (%v), encoding/json %v (%v)", meta, got, ok, want, werr)
		}
	})
}
