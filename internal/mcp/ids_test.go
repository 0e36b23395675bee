package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rawMessages are the JSON-RPC messages of an answer, their members as
// written.
func rawMessages(t *testing.T, a answer) []map[string]json.RawMessage {
	t.Helper()
	var texts []string
	if a.contentType == "application/json" {
		texts = []string{a.raw}
	} else {
		for _, line := range strings.Split(a.raw, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				texts = append(texts, data)
			}
		}
	}
	var out []map[string]json.RawMessage
	for _, text := range texts {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			t.Fatalf("message %q: %v", text, err)
		}
		out = append(out, m)
	}
	return out
}

// idsHandler is fixedHandler, with the operations of a finished task.
func idsHandler(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	switch c.Op {
	case toolcall.OpGetOperation, toolcall.OpCancelOperation:
		at := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
		return toolcall.Result{Detail: &toolcall.Detail{Operation: &toolcall.Operation{ID: c.Name, State: "done", Done: true, Created: at, Ended: at, Output: "done"}}}, nil
	case toolcall.OpListTools:
		return toolcall.Result{Detail: &toolcall.Detail{Tools: []*registry.Tool{{Name: "json"}}}}, nil
	}
	return fixedHandler(ctx, c, emit)
}

// TestIDsEchoedExactly: every answer carries the request's id exactly as
// it was written — a number past 2^53 or 2^63, a fraction, an exponent, a
// string with escapes — on the fast path and the SDK's, in both protocol
// revisions: results, errors, refusals, tasks; and every progress
// notification the progressToken as written.
func TestIDsEchoedExactly(t *testing.T) {
	t.Parallel()
	ids := []string{`9007199254740993`, `1.5`, `123456789012345678901234567890`, `-9223372036854775809`, `-0`, `1E2`,
		`"a\u0062"`, `"\u2028"`, `"tab\t"`, `7`, `"plain"`}
	const taskMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
	type request struct {
		name   string
		body   func(id string) string
		header map[string]string
		status int
	}
	revisions := map[string][]request{
		"2025-11-25": {
			{"result", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json"}}`
			}, nil, 200},
			{"progress", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json","_meta":{"progressToken":` + id + `}}}`
			}, nil, 200},
			{"error", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"missing"}}`
			}, nil, 200},
			{"tools/list", func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"}` }, nil, 200},
			{"unknown method", func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"prompts/list"}` }, nil, 200},
			{"unknown protocol version", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json"}}`
			}, map[string]string{"Mcp-Protocol-Version": "1999-01-01"}, 400},
		},
		"2026-07-28": {
			{"result", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`
			}, modernHeader("json"), 200},
			{"progress", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json",` + modernMeta(`,"progressToken":`+id) + `}}`
			}, modernHeader("json"), 200},
			{"error", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"missing",` + modernMeta("") + `}}`
			}, modernHeader("missing"), 400},
			{"header mismatch", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"json",` + modernMeta("") + `}}`
			}, modernHeader("other"), 400},
			{"tools/list", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list","params":{` + modernMeta("") + `}}`
			}, with(modernHeader(""), "Mcp-Method", "tools/list"), 200},
			{"tasks/get", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tasks/get","params":{"taskId":"t1",` + taskMeta + `}}`
			}, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": "t1"}, 200},
			{"tasks/get refused", func(id string) string {
				return `{"jsonrpc":"2.0","id":` + id + `,"method":"tasks/get","params":{"taskId":"t1",` + modernMeta("") + `}}`
			}, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": "t1"}, 400},
		},
	}
	for _, noFast := range []bool{false, true} {
		s := New(idsHandler, Options{NoFastPath: noFast, Tasks: true, TaskSupport: func(string) string { return registry.TaskOptional }})
		for revision, requests := range revisions {
			for _, rq := range requests {
				for _, id := range ids {
					t.Run(fmt.Sprintf("%s %s id %s fast path %v", revision, rq.name, id, !noFast), func(t *testing.T) {
						a := post(t, s, rq.body(id), rq.header)
						if a.code != rq.status || strings.Contains(a.raw, "toolgate-id-") {
							t.Fatalf("HTTP %d, want %d: %s", a.code, rq.status, a.raw)
						}
						msgs := rawMessages(t, a)
						if len(msgs) == 0 {
							t.Fatalf("no message: %s", a.raw)
						}
						progress := 0
						for _, m := range msgs[:len(msgs)-1] {
							var p struct {
								Token json.RawMessage `json:"progressToken"`
							}
							if string(m["method"]) != `"notifications/progress"` || json.Unmarshal(m["params"], &p) != nil || string(p.Token) != id {
								t.Errorf("notification %s, want notifications/progress with progressToken %s", mustJSON(m), id)
							}
							progress++
						}
						if (rq.name == "progress") != (progress > 0) {
							t.Errorf("%d progress notifications: %s", progress, a.raw)
						}
						last := msgs[len(msgs)-1]
						if string(last["id"]) != id {
							t.Errorf("answered with id %s, want %s: %s", last["id"], id, a.raw)
						}
						if rq.status == 400 && last["error"] == nil {
							t.Errorf("no error: %s", a.raw)
						}
					})
				}
			}
		}
	}
	// A batch is refused whole, as no request of it: id null.
	s := New(idsHandler, Options{})
	a := post(t, s, `[{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}]`, nil)
	if msgs := rawMessages(t, a); a.code != 400 || len(msgs) != 1 || string(msgs[0]["id"]) != "null" {
		t.Errorf("batch: HTTP %d %s", a.code, a.raw)
	}
	// A request refused for its credentials: its id.
	s = New(idsHandler, Options{Authenticate: func(context.Context, *toolcall.Call) error {
		return status.Error(codes.Unauthenticated, "no credentials")
	}})
	for _, id := range ids {
		a := post(t, s, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, nil)
		if msgs := rawMessages(t, a); a.code != 401 || len(msgs) != 1 || string(msgs[0]["id"]) != id {
			t.Errorf("refused credentials, id %s: HTTP %d %s", id, a.code, a.raw)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzStandIn: for any body, the surrogates stand exactly where ids the
// SDK would not echo were, and putting the originals back gives the body
// again.
func FuzzStandIn(f *testing.F) {
	for _, b := range []string{`{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, `{"id":"a\u0062","id":123456789012345678901234567890}`,
		` { "id" : -0 , "params":{"id":1.5}}`, `{"i\u0064":1e2}`, `{"id":7}`, `[{"id":1.5}]`, `{"id":{"x":1.5}}`, `{"id":1.5`} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		ids, _ := idMembers([]byte(body))
		out, subs := standIn([]byte(body), ids)
		if subs == nil {
			if string(out) != body {
				t.Fatalf("%q changed without surrogates: %q", body, out)
			}
			return
		}
		if json.Valid(out) != json.Valid([]byte(body)) {
			t.Fatalf("%q became %q", body, out)
		}
		back := string(out)
		for _, s := range subs {
			if echoable(s.stand) != true || !sdkEchoes(s.stand) || sdkEchoes(s.original) {
				t.Fatalf("%q: surrogate %s for %s", body, s.stand, s.original)
			}
			back = strings.Replace(back, string(s.stand), string(s.original), 1)
		}
		if back != body {
			t.Fatalf("%q: with the originals back %q", body, back)
		}
		ids, err := idMembers(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if echoable(id.value) && !sdkEchoes(id.value) {
				t.Fatalf("%q: id %s left to the SDK", out, id.value)
			}
		}
	})
}
