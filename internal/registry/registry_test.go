package registry

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func load(t *testing.T, name string) *Snapshot {
	t.Helper()
	s, err := LoadFile(filepath.Join("testdata", name), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSeedExamples(t *testing.T) {
	s := load(t, "seed.yaml")
	cases := []struct {
		tool, service, req, resp, config string
	}{
		{"query-customers", "custom-rag", "non-persistent://tg/request/custom-rag-request", "non-persistent://tg/response/custom-rag-request", `{"collection":"customers"}`},
		{"query-products", "custom-rag", "non-persistent://tg/request/custom-rag-request", "non-persistent://tg/response/custom-rag-request", `{"collection":"products"}`},
		{"tell-joke", "joke-service", "non-persistent://tg/request/joke", "non-persistent://tg/response/joke", `{"style":"pun"}`},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			tool, ok := s.Tool(c.tool)
			if !ok {
				t.Fatalf("tool %s missing", c.tool)
			}
			if tool.Service.ID != c.service || tool.Service.RequestTopic != c.req || tool.Service.ResponseTopic != c.resp {
				t.Fatalf("service %+v", tool.Service)
			}
			if tool.ConfigJSON != c.config {
				t.Fatalf("config %s, want %s", tool.ConfigJSON, c.config)
			}
		})
	}
	if q, _ := s.Tool("query-customers"); q.Service != mustTool(t, s, "query-products").Service {
		t.Fatal("two tools of one service should share the service descriptor")
	}
	if got := len(s.Services()); got != 3 {
		t.Fatalf("%d services, want 3", got)
	}
	var names []string
	for _, tl := range s.Tools() {
		names = append(names, tl.Name)
	}
	if want := []string{"query-customers", "query-products", "tell-joke"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func mustTool(t *testing.T, s *Snapshot, name string) *Tool {
	t.Helper()
	tl, ok := s.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tl
}

func TestTrustGraphDump(t *testing.T) {
	s := load(t, "trustgraph-dump.json")
	tl := mustTool(t, s, "tell-joke")
	if tl.Service.RequestTopic != "non-persistent://tg/request/joke" || tl.Service.ResponseTopic != "non-persistent://tg/response/joke" {
		t.Fatalf("queues not expanded: %+v", tl.Service)
	}
	// Only declared params are sent; "unrelated" is not one.
	if tl.ConfigJSON != `{"style":"dad-joke"}` {
		t.Fatalf("config %s", tl.ConfigJSON)
	}
	if len(s.Tools()) != 1 {
		t.Fatalf("other tool types should be skipped, got %d tools", len(s.Tools()))
	}
}

func TestConfigValuesKeepTheirTypes(t *testing.T) {
	s, err := Parse("types.json", []byte(`{
		"tool-service": {"svc": {"topic": "t", "config-params": ["n", "b", "o", "l", "s"]}},
		"tool": {"x": {"type": "tool-service", "service": "svc", "n": 1.5, "b": true, "o": {"k": [1, "two"]}, "l": [null], "s": "str"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mustTool(t, s, "x").ConfigJSON, `{"b":true,"l":[null],"n":1.5,"o":{"k":[1,"two"]},"s":"str"}`; got != want {
		t.Fatalf("config %s, want %s", got, want)
	}
}

func TestSchema(t *testing.T) {
	s, err := Parse("schema.yaml", []byte(`
tool-service: {svc: {topic: t, timeout: 2.5}}
tool:
  x:
    type: tool-service
    service: svc
    strict: true
    arguments:
      - {name: q, type: string, description: the question, required: true}
      - {name: n, type: integer}
      - {name: untyped}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	tl := mustTool(t, s, "x")
	if tl.Service.Timeout != 2500*time.Millisecond {
		t.Fatalf("timeout %v", tl.Service.Timeout)
	}
	want := map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"type":    "object",
		"properties": map[string]any{
			"q":       map[string]any{"type": "string", "description": "the question"},
			"n":       map[string]any{"type": "integer"},
			"untyped": map[string]any{"type": "string"},
		},
		"required":             []any{"q"},
		"additionalProperties": false,
	}
	if !reflect.DeepEqual(tl.Schema, want) {
		t.Fatalf("schema %v\nwant %v", tl.Schema, want)
	}
}

// TestProblems checks every validation rule through one file with many
// problems; the message list is a golden file (go test -update rewrites it).
func TestProblems(t *testing.T) {
	_, err := LoadFile(filepath.Join("testdata", "bad.yaml"), nil)
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *LoadError", err)
	}
	golden := filepath.Join("testdata", "bad.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, rerr := os.ReadFile(golden)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if got := err.Error() + "\n"; got != string(want) {
		t.Fatalf("problems differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

func TestDocumentErrors(t *testing.T) {
	cases := map[string]string{
		"":                           "the file is empty",
		"{":                          "not valid JSON",
		"tool: [1, 2]":               "tool: must be a mapping",
		"- a\n- b":                   "not a mapping",
		"tool-service: 5":            "tool-service: must be a mapping",
		":\n  - [":                   "not valid YAML",
		`{"tool": {"x": "{bad"}}`:    "descriptor is a string but not a JSON object",
		`{"tool-service": {"x": 1}}`: "descriptor must be an object",
	}
	for in, want := range cases {
		_, err := Parse("doc", []byte(in), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestRegistrySwap(t *testing.T) {
	a := load(t, "seed.yaml")
	r := New(a)
	if r.Snapshot() != a || a.Version != 1 {
		t.Fatalf("first snapshot version %d", a.Version)
	}
	b := load(t, "trustgraph-dump.json")
	r.Swap(b)
	if r.Snapshot() != b || b.Version != 2 {
		t.Fatalf("second snapshot version %d", b.Version)
	}
	if _, ok := a.Tool("query-customers"); !ok {
		t.Fatal("an old snapshot must stay usable after a swap")
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"seed.yaml", "trustgraph-dump.json", "bad.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"tool-service": {"a": {"topic": "t", "config-params": [null]}}, "tool": {"b": {"type": "tool-service", "service": "a", "arguments": [null]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz", data, nil)
		if err == nil {
			for _, tl := range s.Tools() {
				if tl.Service == nil || tl.Name == "" {
					t.Fatalf("accepted an invalid tool: %+v", tl)
				}
			}
		}
	})
}

func TestTaskSupport(t *testing.T) {
	s, err := Parse("tasks.yaml", []byte(`
tool-service: {svc: {topic: t}}
tool:
  plain: {type: tool-service, service: svc}
  never: {type: tool-service, service: svc, task-support: forbidden}
  may: {type: tool-service, service: svc, task-support: optional}
  must: {type: tool-service, service: svc, task-support: required}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"plain": TaskForbidden, "never": TaskForbidden, "may": TaskOptional, "must": TaskRequired} {
		if got := mustTool(t, s, name).TaskSupport; got != want {
			t.Errorf("%s: task support %q, want %q", name, got, want)
		}
	}
	_, err = Parse("tasks.yaml", []byte(`
tool-service: {svc: {topic: t}}
tool:
  x: {type: tool-service, service: svc, task-support: always}
`), nil)
	if err == nil || !strings.Contains(err.Error(), `"task-support" must be "forbidden", "optional" or "required"`) {
		t.Fatalf("task-support: always: %v", err)
	}
}

func TestResult(t *testing.T) {
	s, err := Parse("result.yaml", []byte(`
tool-service: {svc: {topic: t}}
tool:
  plain: {type: tool-service, service: svc}
  text: {type: tool-service, service: svc, result: text}
  content: {type: tool-service, service: svc, result: mcp-content}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"plain": ResultText, "text": ResultText, "content": ResultMCPContent} {
		if got := mustTool(t, s, name).Result; got != want {
			t.Errorf("%s: result %q, want %q", name, got, want)
		}
	}
	for _, bad := range []string{"html", "true", "[mcp-content]", "MCP-Content"} {
		_, err = Parse("result.yaml", []byte(`
tool-service: {svc: {topic: t}}
tool:
  x: {type: tool-service, service: svc, result: `+bad+`}
`), nil)
		if err == nil || !strings.Contains(err.Error(), `"result" must be "text" or "mcp-content"`) {
			t.Errorf("result: %s: %v", bad, err)
		}
	}
}
