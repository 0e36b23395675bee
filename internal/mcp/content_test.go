package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/registry"
)

// contentJSON is the content array blocks make on the wire.
func contentJSON(t testing.TB, blocks []sdk.Content) string {
	t.Helper()
	b, err := json.Marshal(blocks)
	if err != nil {
		t.Fatalf("encoding %d blocks: %v", len(blocks), err)
	}
	return string(b)
}

func TestDecodeContent(t *testing.T) {
	t.Parallel()
	const png = "iVBORw0KGgo=" // the PNG signature
	for _, tc := range []struct {
		name, output string
		want         string // the content array as the client receives it
		err          string // else: a part of the error
	}{
		{"empty array", `[]`, `[]`, ""},
		{"text", `[{"type":"text","text":"hi"}]`, `[{"type":"text","text":"hi"}]`, ""},
		{"empty text", `[{"type":"text","text":""}]`, `[{"type":"text","text":""}]`, ""},
		{"image", `[{"type":"image","data":"` + png + `","mimeType":"image/png"}]`, `[{"type":"image","mimeType":"image/png","data":"` + png + `"}]`, ""},
		{"audio", `[{"type":"audio","data":"UklGRg==","mimeType":"audio/wav"}]`, `[{"type":"audio","mimeType":"audio/wav","data":"UklGRg=="}]`, ""},
		{"embedded text", `[{"type":"resource","resource":{"uri":"test://r","mimeType":"text/plain","text":"x"}}]`,
			`[{"type":"resource","resource":{"uri":"test://r","mimeType":"text/plain","text":"x"}}]`, ""},
		{"embedded blob", `[{"type":"resource","resource":{"uri":"test://b","blob":"AAE="}}]`,
			`[{"type":"resource","resource":{"uri":"test://b","blob":"AAE="}}]`, ""},
		{"resource link", `[{"type":"resource_link","uri":"file:///a.txt","name":"a","title":"A","description":"d","mimeType":"text/plain","size":3,"icons":[{"src":"data:,"}]}]`,
			`[{"type":"resource_link","mimeType":"text/plain","uri":"file:///a.txt","name":"a","title":"A","description":"d","size":3,"icons":[{"src":"data:,"}]}]`, ""},
		{"annotations and _meta", `[{"type":"text","text":"t","annotations":{"audience":["user"],"priority":0.5},"_meta":{"k":12345678901234567890}}]`,
			`[{"type":"text","text":"t","_meta":{"k":12345678901234567890},"annotations":{"audience":["user"],"priority":0.5}}]`, ""},
		{"unknown members dropped", `[{"type":"text","text":"t","colour":"red"}]`, `[{"type":"text","text":"t"}]`, ""},
		{"log records around", " {\"log\":{\"level\":\"info\",\"data\":\"a\"}}\n[{\"type\":\"text\",\"text\":\"t\"}]{\"log\":{\"level\":\"debug\",\"logger\":\"x\",\"data\":null}} ",
			`[{"type":"text","text":"t"}]`, ""},
		{"null annotations", `[{"type":"text","text":"t","annotations":null}]`, `[{"type":"text","text":"t"}]`, ""},

		{"empty output", ``, "", "no content array"},
		{"plain text", `hello`, "", "not JSON"},
		{"an object", `{"type":"text","text":"t"}`, "", "not a log record"},
		{"a string", `"x"`, "", "neither the content array nor a log record"},
		{"two arrays", `[][]`, "", "more than one content array"},
		{"trailing garbage", `[]x`, "", "not JSON"},
		{"truncated", `[{"type":"text","text":"t"`, "", "not JSON"},
		{"block not an object", `[1]`, "", "content[0]: a content block must be a JSON object"},
		{"null block", `[null]`, "", "content[0]: a content block must be a JSON object"},
		{"no type", `[{"text":"t"}]`, "", "content[0]: no type"},
		{"type not a string", `[{"type":1}]`, "", "content[0]: type must be a string"},
		{"unknown type", `[{"type":"video","data":"AA=="}]`, "", `type "video" is not one of`},
		{"type case", `[{"Type":"text","text":"t"}]`, "", "no type"},
		{"text missing", `[{"type":"text"}]`, "", "content[0]: text: no text"},
		{"text not a string", `[{"type":"text","text":5}]`, "", "text must be a string"},
		{"image without data", `[{"type":"image","mimeType":"image/png"}]`, "", "image: no data"},
		{"image empty data", `[{"type":"image","data":"","mimeType":"image/png"}]`, "", "image: data is empty"},
		{"image not base64", `[{"type":"image","data":"@@@","mimeType":"image/png"}]`, "", "image: data is not base64"},
		{"image without MIME type", `[{"type":"image","data":"` + png + `"}]`, "", "image: no mimeType"},
		{"audio MIME type not a string", `[{"type":"audio","data":"AA==","mimeType":true}]`, "", "audio: mimeType must be a string"},
		{"second block bad", `[{"type":"text","text":"t"},{"type":"audio"}]`, "", "content[1]: audio: no data"},
		{"resource missing", `[{"type":"resource"}]`, "", "resource: no resource"},
		{"resource not an object", `[{"type":"resource","resource":"x"}]`, "", "resource must be a JSON object"},
		{"resource without URI", `[{"type":"resource","resource":{"text":"x"}}]`, "", "resource: no uri"},
		{"resource without text or blob", `[{"type":"resource","resource":{"uri":"a:b"}}]`, "", "either text or blob"},
		{"resource with both", `[{"type":"resource","resource":{"uri":"a:b","text":"x","blob":"AA=="}}]`, "", "either text or blob"},
		{"resource empty text", `[{"type":"resource","resource":{"uri":"a:b","text":""}}]`, "", "text is empty"},
		{"resource blob not base64", `[{"type":"resource","resource":{"uri":"a:b","blob":"%"}}]`, "", "blob is not base64"},
		{"link without name", `[{"type":"resource_link","uri":"a:b"}]`, "", "resource_link: no name"},
		{"link negative size", `[{"type":"resource_link","uri":"a:b","name":"n","size":-1}]`, "", "size must be a whole number"},
		{"link icons not an array", `[{"type":"resource_link","uri":"a:b","name":"n","icons":{}}]`, "", "icons must be an array"},
		{"link icon without src", `[{"type":"resource_link","uri":"a:b","name":"n","icons":[{}]}]`, "", "icons[0] has no src"},
		{"annotations not an object", `[{"type":"text","text":"t","annotations":[]}]`, "", "annotations must be an object"},
		{"unknown audience", `[{"type":"text","text":"t","annotations":{"audience":["robot"]}}]`, "", `audience "robot"`},
		{"priority past 1", `[{"type":"text","text":"t","annotations":{"priority":2}}]`, "", "priority must be from 0 to 1"},
		{"_meta not an object", `[{"type":"text","text":"t","_meta":"x"}]`, "", "_meta must be a JSON object"},
		{"log record of an unknown level", `{"log":{"level":"verbose","data":1}}[]`, "", `level "verbose" is not one of`},
		{"log record without data", `{"log":{"level":"info"}}[]`, "", "log record: no data"},
		{"log record not an object", `{"log":"hello"}[]`, "", "a log record's log must be a JSON object"},
		{"log record with more members", `{"log":{"level":"info","data":1},"x":1}[]`, "", "not a log record"},
		{"log record's logger not a string", `{"log":{"level":"info","data":1,"logger":2}}[]`, "", "logger must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			blocks, err := decodeContent(tc.output, ContentBounds{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("decodeContent(%q) = %d blocks, %v; want an error with %q", tc.output, len(blocks), err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeContent(%q): %v", tc.output, err)
			}
			if got := contentJSON(t, blocks); got != tc.want {
				t.Errorf("decodeContent(%q):\n got %s\nwant %s", tc.output, got, tc.want)
			}
		})
	}
}

func TestLogChunk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, chunk string
		ok          bool
		want        string // the notification's params
	}{
		{"message", `{"log":{"level":"info","data":"started"}}`, true, `{"data":"started","level":"info"}`},
		{"with logger and an object", ` {"log":{"level":"error","logger":"db","data":{"n":12345678901234567890}}} ` + "\n", true,
			`{"data":{"n":12345678901234567890},"level":"error","logger":"db"}`},
		{"null data", `{"log":{"level":"debug","data":null}}`, true, `{"data":null,"level":"debug"}`},
		{"plain text", `50%`, false, ""},
		{"a content piece", `{"type":"text","text":"t"}`, false, ""},
		{"the content array", `[{"type":"text","text":"t"}]`, false, ""},
		{"unknown level", `{"log":{"level":"loud","data":1}}`, false, ""},
		{"log and more", `{"log":{"level":"info","data":1}}[]`, false, ""},
		{"not JSON", `{"log":`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, ok := logChunk(tc.chunk, ContentBounds{}.orDefaults())
			if ok != tc.ok {
				t.Fatalf("logChunk(%q) ok = %v, want %v", tc.chunk, ok, tc.ok)
			}
			if !ok {
				return
			}
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("logChunk(%q) = %s, want %s", tc.chunk, b, tc.want)
			}
		})
	}
}

func TestLogFiltering(t *testing.T) {
	t.Parallel()
	level := func(l string) map[string]any { return map[string]any{sdk.MetaKeyLogLevel: l} }
	for _, tc := range []struct {
		name   string
		meta   map[string]any
		modern bool
		want   string // the threshold
	}{
		{"before 2026-07-28: stateless, info", nil, false, "info"},
		{"before 2026-07-28, _meta ignored", level("error"), false, "info"},
		{"2026-07-28 without a level: none", nil, true, ""},
		{"2026-07-28 debug", level("debug"), true, "debug"},
		{"2026-07-28 warning", level("warning"), true, "warning"},
		{"2026-07-28 not a level: none", level("loud"), true, ""},
		{"2026-07-28 level not a string: none", map[string]any{sdk.MetaKeyLogLevel: 3.0}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := logThreshold(tc.meta, tc.modern); got != tc.want {
				t.Errorf("logThreshold = %q, want %q", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		level, threshold string
		want             bool
	}{
		{"debug", "debug", true},
		{"info", "debug", true},
		{"emergency", "debug", true},
		{"debug", "info", false},
		{"info", "info", true},
		{"warning", "error", false},
		{"alert", "critical", true},
		{"critical", "emergency", false},
		{"info", "", false},
		{"error", "loud", false},
		{"loud", "debug", false},
	} {
		if got := wantLog(sdk.LoggingLevel(tc.level), tc.threshold); got != tc.want {
			t.Errorf("wantLog(%q, %q) = %v, want %v", tc.level, tc.threshold, got, tc.want)
		}
	}
}

// TestBadContentIsAToolError: malformed content is a tool result with
// isError and type BAD_CONTENT, and its cause is logged.
func TestBadContentIsAToolError(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	s := New(fixedHandler, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		Result: func(string) string { return registry.ResultMCPContent }})
	// In a tool set the refusal names the tool as the set shows it.
	res := s.toolResult(context.Background(), "registry-pictures", "pictures", `[{"type":"image","mimeType":"image/png"}]`)
	b, _ := json.Marshal(res)
	if strings.Contains(string(b), "registry-pictures") || !res.IsError || !strings.Contains(string(b), `BAD_CONTENT: tool \"pictures\" answered with malformed MCP content: content[0]: image: no data`) ||
		!strings.Contains(string(b), `"structuredContent":{"error":{"code":"Internal","message":`) {
		t.Errorf("result = %s", b)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "tool=pictures") {
		t.Errorf("log = %q", logged.String())
	}
	// A tool of text output is not read as content.
	s = New(fixedHandler, Options{Result: func(string) string { return registry.ResultText }})
	if res := s.toolResult(context.Background(), "pictures", "pictures", `[{"type":"image"}]`); res.IsError || len(res.Content) != 1 {
		t.Errorf("text tool: %+v", res)
	}
}

// FuzzDecodeContent: the output of a tool comes from the bus; whatever it
// is, decoding it does not panic, and content it accepts goes to the
// client as a content array that decodes to itself.
func FuzzDecodeContent(f *testing.F) {
	for _, s := range []string{
		`[]`, `[{"type":"text","text":"hi"}]`,
		`{"log":{"level":"info","data":"a"}}[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","annotations":{"priority":1}}]`,
		`[{"type":"resource","resource":{"uri":"u:1","blob":"AAE=","_meta":{"a":[1,{"b":null}]}}},{"type":"resource_link","uri":"u","name":"n","size":0,"icons":[{"src":"s","sizes":["any"]}]}]`,
		`[{"type":"audio","data":"UklGRg==","mimeType":"audio/wav","_meta":{}}]`,
		`[{"type":"text","text":"\ud83d"}]`, `[1,2]`, `{"log":{}}`, `[[[[`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, output string) {
		blocks, err := decodeContent(output, ContentBounds{})
		if err != nil {
			return
		}
		wire := contentJSON(t, blocks)
		again, err := decodeContent(wire, ContentBounds{})
		if err != nil {
			t.Fatalf("%q decoded, but what it sends does not: %s: %v", output, wire, err)
		}
		if got := contentJSON(t, again); got != wire {
			t.Fatalf("%q: sent %s, which decodes to %s", output, wire, got)
		}
	})
}
