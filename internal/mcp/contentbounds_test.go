package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// manyBlocks is a content array of n text blocks.
func manyBlocks(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"x"},`, n), ",") + "]"
}

// deepObject is a JSON object nested n objects deep.
func deepObject(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }

// deepMeta is a content array of one block whose _meta nests n objects
// deep (the block's own depth is 2).
func deepMeta(n int) string {
	return `[{"type":"text","text":"t","_meta":` + deepObject(n) + `}]`
}

// deepLog is a log record whose data nests n objects deep.
func deepLog(n int) string { return `{"log":{"level":"warning","data":` + deepObject(n) + `}}` }

func TestContentBounds(t *testing.T) {
	t.Parallel()
	small := ContentBounds{Blocks: 3, Depth: 5, Bytes: 200}
	for _, tc := range []struct {
		name   string
		bounds ContentBounds
		output string
		err    string // "" accepted
	}{
		{"100,000 blocks", ContentBounds{}, manyBlocks(100_000), "the content array holds more than 1000 blocks"},
		{"1000 blocks", ContentBounds{}, manyBlocks(1000), ""},
		{"_meta 5,000 deep", ContentBounds{}, deepMeta(5000), "the output nests arrays and objects deeper than 64 levels"},
		{"_meta at the bound", ContentBounds{}, deepMeta(62), ""},
		{"_meta past the bound", ContentBounds{}, deepMeta(63), "deeper than 64 levels"},
		{"log record 5,000 deep", ContentBounds{}, deepLog(5000) + `[]`, "deeper than 64 levels"},
		{"too large", ContentBounds{}, `[{"type":"text","text":"` + strings.Repeat("x", DefaultMaxContentBytes) + `"}]`, "more than the 16777216 bytes MCP content may be"},
		{"3 blocks", small, `[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"}]`, ""},
		{"4 blocks", small, `[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"},1]`, "more than 3 blocks"},
		{"scalars counted", small, `[1, "two", null, false]`, "more than 3 blocks"},
		{"nested arrays not blocks", small, `[{"type":"text","text":"a","_meta":{"l":[1,2,3,4,5]}}]`, ""},
		{"log records not blocks", small, `{"log":{"level":"info","data":[1,2,3,4]}}[{"type":"text","text":"a"}]`, ""},
		{"brackets in strings", small, `[{"type":"text","text":"[[[[[[,,,,{{{{\"]"}]`, ""},
		{"depth 5", small, `[{"type":"text","text":"a","_meta":{"b":{"c":{}}}}]`, ""},
		{"depth 6", small, `[{"type":"text","text":"a","_meta":{"b":{"c":{"d":{}}}}}]`, "deeper than 5 levels"},
		{"201 bytes", small, `[{"type":"text","text":"` + strings.Repeat("x", 201-len(`[{"type":"text","text":""}]`)) + `"}]`, "the output is 201 bytes, more than the 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeContent(tc.output, tc.bounds)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("decodeContent: %v, want %q", err, tc.err)
			}
		})
	}
}

// heapAllocs is the bytes allocated on the heap so far.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestContentBoundsMemory: 100,000 blocks are refused from their text,
// without building anything of them — a handful of allocations, far fewer
// bytes than the output itself (decoding them took ~40 times its size).
func TestContentBoundsMemory(t *testing.T) {
	output := manyBlocks(100_000)
	const runs = 5
	var err error
	allocs := testing.AllocsPerRun(runs, func() { _, err = decodeContent(output, ContentBounds{}) })
	if err == nil {
		t.Fatal("100,000 blocks accepted")
	}
	before := heapAllocs()
	for range runs {
		_, _ = decodeContent(output, ContentBounds{})
	}
	perRun := (heapAllocs() - before) / runs
	t.Logf("an output of %d bytes: %.0f allocations, %d bytes allocated", len(output), allocs, perRun)
	if allocs > 10 || perRun > uint64(len(output))/4 {
		t.Errorf("refusing %d bytes of 100,000 blocks took %.0f allocations and %d bytes", len(output), allocs, perRun)
	}
}

// boundsHandler is a tool service of MCP content answering beyond the
// bounds: many blocks, a deep _meta, a deep log record sent as a chunk of
// its own, or a stream too large in all.
func boundsHandler(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	var chunks []string
	switch c.Name {
	case "many":
		chunks = []string{manyBlocks(100_000)}
	case "deep-meta":
		chunks = []string{deepMeta(5000)}
	case "deep-log":
		chunks = []string{deepLog(5000), `{"log":{"level":"info","data":"fine"}}`, `[{"type":"text","text":"t"}]`}
	case "large-stream":
		for range 20 {
			chunks = append(chunks, `{"log":{"level":"info","data":"`+strings.Repeat("x", 100)+`"}}`)
		}
		chunks = append(chunks, `[]`)
	default:
		chunks = []string{`[{"type":"text","text":"fine"}]`}
	}
	if emit == nil {
		return toolcall.Result{Output: strings.Join(chunks, "")}, nil
	}
	for i, ch := range chunks {
		if err := emit(toolcall.Chunk{Index: int64(i), Text: ch, Last: i == len(chunks)-1}); err != nil {
			return toolcall.Result{}, err
		}
	}
	return toolcall.Result{}, nil
}

// TestContentBoundsAreToolErrors: through the endpoint, in both protocol
// revisions, on the fast path and the SDK's, an output beyond a bound is
// a BAD_CONTENT tool error naming the bound, its cause in the log; a deep
// log record is never sent.
func TestContentBoundsAreToolErrors(t *testing.T) {
	t.Parallel()
	content := func(string) string { return registry.ResultMCPContent }
	for _, tc := range []struct {
		tool, want string
	}{
		{"many", "the content array holds more than 1000 blocks"},
		{"deep-meta", "the output nests arrays and objects deeper than 64 levels"},
		{"deep-log", "the output nests arrays and objects deeper than 64 levels"},
		{"large-stream", "the output is 2682 bytes, more than the 1000 bytes MCP content may be"},
	} {
		for _, v := range []struct {
			name, meta string
			header     map[string]string
		}{
			{"2025-11-25", "", map[string]string{"Mcp-Protocol-Version": "2025-11-25"}},
			{"2026-07-28", `,` + modernMeta(""), modernHeader(tc.tool)},
			{"2026-07-28 log records", `,` + modernMeta(`,"io.modelcontextprotocol/logLevel":"debug"`), modernHeader(tc.tool)},
		} {
			for _, noFast := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s no fast path %v", tc.tool, v.name, noFast), func(t *testing.T) {
					t.Parallel()
					var logged syncBuffer
					bounds := ContentBounds{}
					if tc.tool == "large-stream" {
						bounds.Bytes = 1000
					}
					s := New(boundsHandler, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), Result: content,
						ContentBounds: bounds, NoFastPath: noFast})
					body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tc.tool + `"` + v.meta + `}}`
					a := post(t, s, body, v.header)
					if strings.Contains(a.raw, strings.Repeat(`{"a":`, 100)) {
						t.Errorf("deep JSON forwarded: %.300s", a.raw)
					}
					msg, _ := a.message.(map[string]any)
					res, _ := msg["result"].(map[string]any)
					b, _ := json.Marshal(res)
					if res["isError"] != true || !strings.Contains(string(b), `BAD_CONTENT: tool \"`+tc.tool+`\" answered with malformed MCP content: `+tc.want) {
						t.Fatalf("HTTP %d, result %.500s", a.code, b)
					}
					if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), tc.want) {
						t.Errorf("log %q does not give the cause", logged.String())
					}
				})
			}
		}
	}
	// Within the bounds, the same tools answer.
	s := New(boundsHandler, Options{Result: content})
	a := post(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fine"}}`, nil)
	if !strings.Contains(a.raw, `"content":[{"type":"text","text":"fine"}]`) {
		t.Errorf("fine: %s", a.raw)
	}
}

// TestDeepStructuredContent: the output of a tool of text that is a JSON
// object nested deeper than DefaultMaxContentDepth is given as text alone,
// not forwarded as structuredContent (on the fast path and the SDK's, in
// both revisions); one within the bound is both.
func TestDeepStructuredContent(t *testing.T) {
	t.Parallel()
	handler := func(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
		out := deepObject(64)
		if c.Name == "deep" {
			out = deepObject(5000)
		}
		if emit != nil {
			return toolcall.Result{}, emit(toolcall.Chunk{Text: out, Last: true})
		}
		return toolcall.Result{Output: out}, nil
	}
	for _, noFast := range []bool{false, true} {
		s := New(handler, Options{NoFastPath: noFast})
		for _, tool := range []string{"deep", "within"} {
			for revision, header := range map[string]map[string]string{
				"2025-11-25": {"Mcp-Protocol-Version": "2025-11-25"}, "2026-07-28": modernHeader(tool)} {
				meta := ""
				if revision == modernVersion {
					meta = "," + modernMeta("")
				}
				a := post(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`"`+meta+`}}`, header)
				msg, _ := a.message.(map[string]any)
				res, _ := msg["result"].(map[string]any)
				content, _ := res["content"].([]any)
				first, _ := func() (map[string]any, bool) {
					if len(content) != 1 {
						return nil, false
					}
					m, ok := content[0].(map[string]any)
					return m, ok
				}()
				_, hasStructured := res["structuredContent"]
				if first["text"] != map[string]string{"deep": deepObject(5000), "within": deepObject(64)}[tool] || hasStructured != (tool == "within") {
					t.Errorf("%s, %s, fast path %v: structuredContent %v, result %.200s", tool, revision, !noFast, hasStructured, a.raw)
				}
			}
		}
	}
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FuzzContentBounds: what decodeContent accepts within small bounds holds
// no more blocks and nests no deeper than they say, by the reckoning of a
// decoder (encoding/json's values, measured).
func FuzzContentBounds(f *testing.F) {
	for _, s := range []string{`[]`, `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, deepMeta(4), deepLog(3) + `[]`,
		`[{"type":"text","text":"\"[[["}]`, manyBlocks(4), `{"log":{"level":"info","data":[[[]]]}}[{"type":"text","text":"a"}]`} {
		f.Add(s)
	}
	small := ContentBounds{Blocks: 3, Depth: 5, Bytes: 4096}
	f.Fuzz(func(t *testing.T, output string) {
		blocks, err := decodeContent(output, small)
		if err != nil {
			return
		}
		if len(blocks) > small.Blocks {
			t.Fatalf("%q: %d blocks accepted", output, len(blocks))
		}
		d := json.NewDecoder(strings.NewReader(output))
		for {
			var v any
			if err := d.Decode(&v); err != nil {
				break
			}
			if n := nesting(v); n > small.Depth {
				t.Fatalf("%q: a value %d deep accepted", output, n)
			}
		}
	})
}

// nesting is how deeply v nests arrays and objects.
func nesting(v any) int {
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, nesting(e))
		}
	case []any:
		for _, e := range x {
			deepest = max(deepest, nesting(e))
		}
	default:
		return 0
	}
	return deepest + 1
}
