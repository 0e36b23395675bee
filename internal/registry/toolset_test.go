package registry

import (
	"strings"
	"testing"
)

const setsDoc = `tool-service:
  svc: {topic: svc}
tool:
  search: {type: tool-service, service: svc, name: search, description: Search everything.}
  query-a: {type: tool-service, service: svc, name: query-a}
  query-b: {type: tool-service, service: svc, name: query-b}
  echo: {type: tool-service, service: svc, name: echo, description: Echoes.}
tool-set:
  research:
    title: Research
    instructions: Search, then summarise.
    tools:
      - search
      - "query-*"
      - {tool: echo, name: repeat, description: Repeats what it is given.}
      - missing-tool
  ops: {tools: [echo, {tool: search, name: echo}]}
`

func TestToolSets(t *testing.T) {
	t.Parallel()
	snap, err := Parse("test", []byte(setsDoc), nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := snap.Set("research")
	if !ok || rs.Title != "Research" || rs.Instructions != "Search, then summarise." {
		t.Fatalf("research: %+v, %v", rs, ok)
	}
	var names []string
	for _, tl := range rs.Tools() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "query-a,query-b,repeat,search" {
		t.Fatalf("research shows %s", got)
	}
	shown, tool, ok := rs.Lookup("repeat")
	if !ok || tool.Name != "echo" || shown.Description != "Repeats what it is given." || shown.Service != tool.Service {
		t.Fatalf("repeat: %+v → %+v", shown, tool)
	}
	if _, _, ok := rs.Lookup("echo"); ok {
		t.Fatal("echo is shown as repeat: its own name is not in the set")
	}
	if s, ok := rs.Shown("echo"); !ok || s.Name != "repeat" {
		t.Fatalf("Shown(echo) = %v", s)
	}
	if orig, _ := snap.Tool("echo"); orig.Name != "echo" || orig.Description != "Echoes." {
		t.Fatal("renaming in a set changed the registry's tool")
	}
	// ops: echo is shown as itself; search cannot take the name echo.
	ops, _ := snap.Set("ops")
	if len(ops.Tools()) != 1 || ops.Title != "ops" {
		t.Fatalf("ops: %d tools, title %q", len(ops.Tools()), ops.Title)
	}
	if _, ok := snap.Set("nope"); ok || len(snap.Sets()) != 2 {
		t.Fatal("sets")
	}
}

func TestToolSetProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, sets, want string }{
		{"bad name", `{"a/b": {tools: [x]}}`, "path segment"},
		{"no tools", `{a: {title: A}}`, "tools must be a list"},
		{"unknown key", `{a: {tools: [x], servers: 2}}`, `unknown key "servers"`},
		{"bad glob", `{a: {tools: ["["]}}`, "not a name or glob"},
		{"glob renamed", `{a: {tools: [{tool: "q-*", name: q}]}}`, "not a glob"},
		{"no tool", `{a: {tools: [{name: q}]}}`, "tool is required"},
		{"bad rename", `{a: {tools: [{tool: q, name: "a b"}]}}`, "is not a tool name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("test", []byte("tool-service: {}\ntool: {}\ntool-set: "+tc.sets+"\n"), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestToolSetsMerged(t *testing.T) {
	t.Parallel()
	m := NewMerger(nil, nil)
	m.Enable(OriginFile)
	m.Enable(OriginConfigService)
	if err := m.Apply(Update{Origin: OriginConfigService, Name: "ws", Doc: []byte(`{"tool-service": {"svc": "{\"topic\": \"svc\"}"}, "tool": {"echo": "{\"type\": \"tool-service\", \"service\": \"svc\", \"name\": \"echo\"}"}, "tool-set": {"a": "{\"title\": \"from config\", \"tools\": [\"echo\"]}", "b": "{\"tools\": [\"*\"]}"}}`)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(Update{Origin: OriginFile, Doc: []byte("tool-set:\n  a: {title: from file, tools: [echo]}\n")}); err != nil {
		t.Fatal(err)
	}
	snap := m.Registry().Snapshot()
	a, _ := snap.Set("a")
	b, _ := snap.Set("b")
	if a == nil || a.Title != "from file" || len(a.Tools()) != 1 || b == nil || len(b.Tools()) != 1 {
		t.Fatalf("a %+v, b %+v", a, b)
	}
	found := false
	for _, c := range m.Conflicts() {
		found = found || c.Kind == "tool-set" && c.Name == "a"
	}
	if !found {
		t.Fatalf("conflicts %v: want the config service's set a to lose to the file's", m.Conflicts())
	}
	// An announcement cannot define sets.
	m.Enable(OriginAnnouncement)
	if err := m.Apply(Update{Origin: OriginAnnouncement, Unit: "svc2", Doc: []byte(`{"tool-service": {"svc2": {"topic": "svc2"}}, "tool-set": {"x": {"tools": ["*"]}}}`)}); err == nil {
		t.Fatal("an announcement with a tool-set was taken")
	}
}
