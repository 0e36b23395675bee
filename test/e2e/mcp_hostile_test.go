package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// hostileMessages posts body to the MCP endpoint at base and returns the
// HTTP status and every JSON-RPC message of the answer, its members as
// written.
func hostileMessages(t *testing.T, base string, header map[string]string, body string) (int, []map[string]json.RawMessage) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/mcp", strings.NewReader(body))
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
	var msgs []map[string]json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			line = d
		} else if !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("message %.200q: %v", line, err)
		}
		msgs = append(msgs, m)
	}
	return resp.StatusCode, msgs
}

// TestMCPHostileInput: against a gateway on the real broker and a Go SDK
// tool service announcing its tools — JSON-RPC ids and progress tokens
// come back exactly as sent (in both protocol revisions, plain calls and
// progress); replies of 100,000 content blocks or of _meta 5,000 deep are
// BAD_CONTENT tool errors; an announcement whose input-schema has a
// reference cycle is refused when it loads, naming the tool and the cycle.
func TestMCPHostileInput(t *testing.T) {
	t.Parallel()
	announce := "persistent://tg/config/" + brokertest.UniqueTopic("hostile-announce")
	id := brokertest.UniqueTopic("hostile-service")
	deep := `[{"type":"text","text":"t","_meta":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000) + `}]`
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"x"},`, 100_000), ",") + "]"
	handle := func(_ context.Context, req *toolservice.Request) (any, error) {
		switch req.Config["fixture"] {
		case "chunks":
			for _, c := range []string{"one", " two"} {
				if err := req.Send(c); err != nil {
					return nil, err
				}
			}
			return "", nil
		case "many":
			return many, nil
		case "deep":
			return deep, nil
		}
		return nil, fmt.Errorf("no fixture %v", req.Config["fixture"])
	}
	svc, err := toolservice.New(toolservice.Config{ID: id, Topic: brokertest.UniqueTopic("hostile"), PulsarURL: brokertest.PulsarURL(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Announce: &toolservice.Announcement{Topic: announce, ConfigParams: []toolservice.ConfigParam{{Name: "fixture", Required: true}},
			Tools: []toolservice.Tool{
				{Name: id + "-chunks", Description: "Two chunks", Config: map[string]any{"fixture": "chunks"}},
				{Name: id + "-many", Description: "100,000 blocks", Config: map[string]any{"fixture": "many"}, Result: toolservice.ResultMCPContent},
				{Name: id + "-deep", Description: "_meta 5,000 deep", Config: map[string]any{"fixture": "deep"}, Result: toolservice.ResultMCPContent},
			}}}, handle)
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, id, svc, 30*time.Second)
	g := startSourceGateway(t, "--announce-topic", announce)
	eventually.True(t, 10*time.Second, "the announced tools are served", func() bool {
		_, err := g.invoke(t.Context(), id+"-chunks", map[string]any{})
		return err == nil
	})

	modernMeta := `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`
	call := func(revision, rpcID, tool, meta string) (int, []map[string]json.RawMessage) {
		header := map[string]string{"Mcp-Protocol-Version": revision}
		if revision == "2026-07-28" {
			header["Mcp-Method"], header["Mcp-Name"] = "tools/call", tool
			meta = strings.TrimPrefix(meta+","+modernMeta, ",")
		}
		return hostileMessages(t, g.base, header,
			`{"jsonrpc":"2.0","id":`+rpcID+`,"method":"tools/call","params":{"name":"`+tool+`","arguments":{},"_meta":{`+meta+`}}}`)
	}

	// Ids and progress tokens, as sent.
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		for _, rpcID := range []string{`9007199254740993`, `1.5`, `123456789012345678901234567890`, `"a\u0062"`} {
			for _, progress := range []bool{false, true} {
				meta := ""
				if progress {
					meta = `"progressToken":` + rpcID
				}
				code, msgs := call(revision, rpcID, id+"-chunks", meta)
				if code != http.StatusOK || len(msgs) == 0 || string(msgs[len(msgs)-1]["id"]) != rpcID {
					t.Errorf("%s, id %s, progress %v: HTTP %d, messages %s", revision, rpcID, progress, code, msgs)
					continue
				}
				tokens := 0
				for _, m := range msgs[:len(msgs)-1] {
					var p struct {
						Token json.RawMessage `json:"progressToken"`
					}
					if json.Unmarshal(m["params"], &p) == nil && string(p.Token) == rpcID {
						tokens++
					}
				}
				if tokens != len(msgs)-1 || progress != (tokens >= 2) {
					t.Errorf("%s, id %s, progress %v: %d of %d notifications with the token as sent", revision, rpcID, progress, tokens, len(msgs)-1)
				}
			}
		}
	}

	// Content beyond the bounds.
	for _, c := range []struct{ tool, want string }{
		{id + "-many", "the content array holds more than 1000 blocks"},
		{id + "-deep", "the output nests arrays and objects deeper than 64 levels"},
	} {
		for _, revision := range []string{"2025-11-25", "2026-07-28"} {
			code, msgs := call(revision, "1", c.tool, "")
			if code != http.StatusOK || len(msgs) == 0 {
				t.Fatalf("%s %s: HTTP %d %s", c.tool, revision, code, msgs)
			}
			var res struct {
				IsError           bool `json:"isError"`
				StructuredContent struct {
					Error struct{ Type, Message string }
				} `json:"structuredContent"`
			}
			last := msgs[len(msgs)-1]
			if err := json.Unmarshal(last["result"], &res); err != nil || !res.IsError || res.StructuredContent.Error.Type != "BAD_CONTENT" ||
				!strings.Contains(res.StructuredContent.Error.Message, c.want) {
				t.Errorf("%s %s: result %.300s", c.tool, revision, last["result"])
			}
		}
	}

	// An announcement whose input schema has a reference cycle.
	cyclic := brokertest.UniqueTopic("cyclic-service")
	publishKeyed(t, pulsarClient(t), announce, cyclic, []byte(`{"tool-service": {"`+cyclic+`": {"topic": "`+cyclic+`"}}, "tool": {"`+cyclic+`-tool": `+
		`{"type": "tool-service", "service": "`+cyclic+`", "input-schema": {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}}}}`))
	var last string
	eventually.True(t, 10*time.Second, "the cyclic announcement is refused, naming the tool and the cycle", func() bool {
		st := sourceStatus(t, g.readyDetails(t), "announcement")
		last = fmt.Sprint(st["last_rejection"])
		return strings.Contains(last, cyclic+"-tool") && strings.Contains(last, "reference cycle") && strings.Contains(last, "#/$defs/a → #/$defs/b → #/$defs/a")
	})
	if _, err := g.invoke(t.Context(), cyclic+"-tool", map[string]any{"x": 1}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("the refused tool answers: %v", err)
	}
}
