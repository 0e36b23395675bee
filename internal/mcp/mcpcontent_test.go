package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/toolservice"
)

// contentRegistry has tools of MCP content, and one that answers the same
// as text.
const contentRegistry = `
tool-service:
  echo-service: {id: echo-service, topic: echo, config-params: [{name: fixture, required: true}]}
tool:
  mixed: {type: tool-service, service: echo-service, fixture: mixed, result: mcp-content}
  mixed-as-text: {type: tool-service, service: echo-service, fixture: mixed}
  logging: {type: tool-service, service: echo-service, fixture: logging, result: mcp-content}
  malformed: {type: tool-service, service: echo-service, fixture: malformed, result: mcp-content}
`

var png = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// handleContent is the tool service of contentRegistry, written with the
// Go SDK's helpers.
func handleContent(_ context.Context, req *toolservice.Request) (any, error) {
	switch req.Config["fixture"] {
	case "mixed":
		return toolservice.Content(
			toolservice.TextContent("several kinds:"),
			toolservice.ImageContent(png, "image/png"),
			toolservice.AudioContent([]byte("RIFF"), "audio/wav"),
			toolservice.ResourceContent("test://text", "application/json", `{"a":1}`),
			toolservice.BlobResourceContent("test://blob", "", []byte{0, 1, 2}),
			toolservice.ResourceLinkContent("file:///r.txt", "r.txt", "text/plain"),
		)
	case "logging":
		for _, l := range []toolservice.LogLevel{toolservice.LogDebug, toolservice.LogInfo, toolservice.LogWarning} {
			if err := req.Log(l, map[string]any{"step": string(l)}); err != nil {
				return nil, err
			}
		}
		return toolservice.Content(toolservice.TextContent("logged"))
	case "malformed":
		return `[{"type":"image","mimeType":"image/png"}]`, nil
	}
	return nil, toolservice.Errorf("not-found", "no fixture %v", req.Config["fixture"])
}

// TestContentThroughTheSDKClient: a tool of MCP content answers with its
// blocks, decoded as the client's SDK decodes them; the same output of a
// tool of text is one text content; malformed content is a tool error.
func TestContentThroughTheSDKClient(t *testing.T) {
	f := newServiceFixture(t, mcp.Options{Result: resultOf(t, contentRegistry)}, contentRegistry, handleContent)
	cs := f.connect(t, nil, nil)
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "mixed"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 6 || res.StructuredContent != nil {
		t.Fatalf("mixed: isError=%v, %d blocks, structured %v", res.IsError, len(res.Content), res.StructuredContent)
	}
	if c, ok := res.Content[0].(*sdk.TextContent); !ok || c.Text != "several kinds:" {
		t.Errorf("block 0 = %#v", res.Content[0])
	}
	if c, ok := res.Content[1].(*sdk.ImageContent); !ok || string(c.Data) != string(png) || c.MIMEType != "image/png" {
		t.Errorf("block 1 = %#v", res.Content[1])
	}
	if c, ok := res.Content[2].(*sdk.AudioContent); !ok || string(c.Data) != "RIFF" || c.MIMEType != "audio/wav" {
		t.Errorf("block 2 = %#v", res.Content[2])
	}
	if c, ok := res.Content[3].(*sdk.EmbeddedResource); !ok || c.Resource.URI != "test://text" || c.Resource.Text != `{"a":1}` || c.Resource.MIMEType != "application/json" {
		t.Errorf("block 3 = %#v", res.Content[3])
	}
	if c, ok := res.Content[4].(*sdk.EmbeddedResource); !ok || c.Resource.URI != "test://blob" || string(c.Resource.Blob) != "\x00\x01\x02" {
		t.Errorf("block 4 = %#v", res.Content[4])
	}
	if c, ok := res.Content[5].(*sdk.ResourceLink); !ok || c.URI != "file:///r.txt" || c.Name != "r.txt" || c.MIMEType != "text/plain" {
		t.Errorf("block 5 = %#v", res.Content[5])
	}

	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "mixed-as-text"})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := handleContent(t.Context(), &toolservice.Request{Config: map[string]any{"fixture": "mixed"}}); res.IsError || text(t, res) != want {
		t.Errorf("mixed-as-text: isError=%v text %q, want the output unchanged, %q", res.IsError, text(t, res), want)
	}

	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "malformed"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(text(t, res), `BAD_CONTENT: tool "malformed" answered with malformed MCP content: content[0]: image: no data`) {
		t.Errorf("malformed: isError=%v text %q", res.IsError, text(t, res))
	}
}

// TestLogRecordsThroughTheSDKClient: the log records of a call reach the
// client's SDK as log messages while it runs, at the level it asked for.
func TestLogRecordsThroughTheSDKClient(t *testing.T) {
	f := newServiceFixture(t, mcp.Options{Result: resultOf(t, contentRegistry)}, contentRegistry, handleContent)
	var mu sync.Mutex
	var got []string
	cs := f.connect(t, nil, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(r.Params.Level))
	}})
	// The client speaks 2026-07-28: the request asks for its level in
	// _meta.
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %s", v)
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "logging", Meta: sdk.Meta{sdk.MetaKeyLogLevel: "info"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || text(t, res) != "logged" {
		t.Fatalf("isError=%v text %q", res.IsError, text(t, res))
	}
	eventually.True(t, 5*time.Second, "two log messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, " ") != "info warning" {
		t.Errorf("log messages at %v, want info warning", got)
	}
}

// TestLogRecordsByRevision: which log records a call's response stream
// carries, by protocol revision and the level asked for; records are never
// progress notifications, nor content.
func TestLogRecordsByRevision(t *testing.T) {
	f := newServiceFixture(t, mcp.Options{Result: resultOf(t, contentRegistry)}, contentRegistry, handleContent)
	call := func(meta string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"logging","arguments":{}` + meta + `}}`
	}
	old := map[string]string{"Mcp-Protocol-Version": "2025-11-25"}
	for _, tc := range []struct {
		name     string
		header   map[string]string
		body     string
		logs     string // the levels of the notifications/message
		progress int
	}{
		{"2025-11-25: stateless, info and above", old, call(""), "info warning", 0},
		{"2025-11-25 with progress", old, call(`,"_meta":{"progressToken":"p"}`), "info warning", 1},
		{"2026-07-28 without a level: none", modern("tools/call", "logging"), call("," + modernMeta), "", 0},
		{"2026-07-28 debug", modern("tools/call", "logging"), call(`,` + modernMetaWith(`"io.modelcontextprotocol/logLevel":"debug"`)), "debug info warning", 0},
		{"2026-07-28 warning", modern("tools/call", "logging"), call(`,` + modernMetaWith(`"io.modelcontextprotocol/logLevel":"warning"`)), "warning", 0},
		{"2026-07-28 emergency", modern("tools/call", "logging"), call(`,` + modernMetaWith(`"io.modelcontextprotocol/logLevel":"emergency"`)), "", 0},
		{"2026-07-28 progress without a level", modern("tools/call", "logging"), call(`,` + modernMetaWith(`"progressToken":7`)), "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := events(t, f.url, tc.header, tc.body)
			var logs []string
			progress := 0
			var last map[string]any
			for _, m := range msgs {
				switch m["method"] {
				case "notifications/message":
					p := m["params"].(map[string]any)
					logs = append(logs, p["level"].(string))
					if d, _ := p["data"].(map[string]any); d["step"] != p["level"] {
						t.Errorf("record %v", p)
					}
				case "notifications/progress":
					progress++
					if msg, _ := m["params"].(map[string]any)["message"].(string); strings.Contains(msg, `"log"`) {
						t.Errorf("a log record as progress: %v", m)
					}
				case nil:
					last = m
				}
			}
			if strings.Join(logs, " ") != tc.logs || progress != tc.progress {
				t.Errorf("log records at %v, %d progress notifications; want %q and %d", logs, progress, tc.logs, tc.progress)
			}
			res, _ := last["result"].(map[string]any)
			if b, _ := json.Marshal(res["content"]); string(b) != `[{"text":"logged","type":"text"}]` {
				t.Errorf("result %v", last)
			}
		})
	}
}

// modernMetaWith is the _meta of a 2026-07-28 request with more members.
func modernMetaWith(more string) string {
	return strings.TrimSuffix(modernMeta, "}") + "," + more + "}"
}

// events posts body and returns every JSON-RPC message of the response.
func events(t *testing.T, url string, header map[string]string, body string) []map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			out = append(out, m)
		}
	}
	return out
}

// resultOf is the Options.Result of the tools of a registry.
func resultOf(t *testing.T, reg string) func(string) string {
	t.Helper()
	snap, err := registry.Parse("t.yaml", []byte(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) string {
		if tl, ok := snap.Tool(name); ok {
			return tl.Result
		}
		return ""
	}
}
