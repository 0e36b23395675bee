package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// taskMeta is the _meta of a request of 2026-07-28 from a client that
// declares the tasks extension.
const taskMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

// fakeOps answers the operation calls of the core from a fixed table (the
// caller's; any other id is NOT_FOUND), and tools/call as a plain echo.
func fakeOps(t *testing.T) toolcall.Handler {
	created := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	failed := func(c codes.Code, reason string) error {
		st, err := status.New(c, "it went wrong").WithDetails(&errdetails.ErrorInfo{Reason: reason})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	ops := map[string]*toolcall.Operation{
		"running": {ID: "running", State: "running", Created: created},
		"done":    {ID: "done", State: "done", Done: true, Created: created, Ended: created.Add(time.Second), Output: `{"n":1}`},
		// An operation of a tool of MCP content: its output as it is kept,
		// log records and all.
		"content": {ID: "content", Tool: "pictures", State: "done", Done: true, Created: created, Ended: created,
			Output: `{"log":{"level":"info","data":"x"}}[{"type":"text","text":"t"}]`},
		"toolerr":   {ID: "toolerr", State: "failed", Done: true, Created: created, Ended: created, Err: failed(codes.Unknown, "job-failed")},
		"badreply":  {ID: "badreply", State: "failed", Done: true, Created: created, Ended: created, Err: failed(codes.Internal, "BAD_REPLY")},
		"cancelled": {ID: "cancelled", State: "cancelled", Done: true, Created: created, Ended: created, Err: status.Error(codes.Canceled, "cancelled")},
	}
	return func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		switch c.Op {
		case toolcall.OpStartTool:
			return toolcall.Result{Detail: &toolcall.Detail{Operation: &toolcall.Operation{ID: "new-" + c.Name, State: "running", Created: created}}}, nil
		case toolcall.OpGetOperation, toolcall.OpCancelOperation:
			if op, ok := ops[c.Name]; ok {
				return toolcall.Result{Detail: &toolcall.Detail{Operation: op}}, nil
			}
			return toolcall.Result{}, status.Error(codes.NotFound, "operation not found")
		case toolcall.OpGetTool:
			if c.Name == "hidden-required" {
				return toolcall.Result{}, status.Error(codes.NotFound, "tool not found")
			}
			return toolcall.Result{}, nil
		case toolcall.OpInvoke:
			return toolcall.Result{Output: "plain " + c.Name}, nil
		}
		return toolcall.Result{}, status.Errorf(codes.Unimplemented, "op %d", c.Op)
	}
}

func taskServer(t *testing.T, tasks bool) string {
	support := map[string]string{"may": registry.TaskOptional, "must": registry.TaskRequired, "hidden-required": registry.TaskRequired}
	srv := mcp.New(fakeOps(t), mcp.Options{Tasks: tasks, TaskTTL: time.Hour, TaskSupport: func(n string) string { return support[n] },
		Result: func(n string) string {
			if n == "pictures" {
				return registry.ResultMCPContent
			}
			return registry.ResultText
		}})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestTasksDeclaredOnlyWhenServed: server/discover declares the extension
// with Tasks (and initialize, of the earlier revisions, never); without
// it the task methods are unknown.
func TestTasksDeclaredOnlyWhenServed(t *testing.T) {
	for _, on := range []bool{false, true} {
		url := taskServer(t, on)
		_, r := post(t, url, modern("server/discover"), `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+modernMeta+`}}`)
		caps, _ := r.Result["capabilities"].(map[string]any)
		ext, _ := caps["extensions"].(map[string]any)
		if _, declared := ext[mcp.TasksExtension]; declared != on {
			t.Errorf("Tasks %v: server/discover capabilities %v", on, caps)
		}
		_, r = post(t, url, nil, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		if caps, _ := r.Result["capabilities"].(map[string]any); caps["extensions"] != nil {
			t.Errorf("Tasks %v: initialize capabilities %v", on, caps)
		}
		_, r = post(t, url, modern("tasks/get", "done"), `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"done",`+taskMeta+`}}`)
		if on != (r.Error == nil) || (!on && r.Error.Code != -32601) {
			t.Errorf("Tasks %v: tasks/get %s", on, r.Raw)
		}
	}
}

// TestTaskAnswers: what tools/call and the task methods answer.
func TestTaskAnswers(t *testing.T) {
	url := taskServer(t, true)
	call := func(name, meta string) (*http.Response, rpcReply) {
		return post(t, url, modern("tools/call", name), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+name+`","arguments":{},`+meta+`}}`)
	}
	task := func(method, id string, header map[string]string) (*http.Response, rpcReply) {
		if header == nil {
			header = modern(method, id)
		}
		return post(t, url, header, `{"jsonrpc":"2.0","id":2,"method":"`+method+`","params":{"taskId":"`+id+`",`+taskMeta+`}}`)
	}

	// A task for a task-supporting tool, from a client that can take one.
	_, r := call("may", taskMeta)
	if r.Result["resultType"] != "task" || r.Result["taskId"] != "new-may" || r.Result["status"] != "working" ||
		r.Result["ttlMs"] != float64(3600000) || r.Result["createdAt"] != "2026-07-28T12:00:00Z" || r.Result["content"] != nil {
		t.Errorf("tools/call may: %s", r.Raw)
	}
	// A plain result for the rest.
	for _, c := range []struct{ name, meta string }{{"plain", taskMeta}, {"may", modernMeta}} {
		if _, r := call(c.name, c.meta); r.Result["resultType"] != "complete" || r.Result["taskId"] != nil || r.Result["content"] == nil {
			t.Errorf("tools/call %s, %s: %s", c.name, c.meta, r.Raw)
		}
	}
	// A tool that runs only as a task, from a client that cannot take one:
	// -32021 naming the extension; a tool the caller may not see: the
	// refusal of an unknown tool.
	if resp, r := call("must", modernMeta); resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32021 ||
		string(r.Error.Data) != `{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}` {
		t.Errorf("tools/call must without the extension: %d %s", resp.StatusCode, r.Raw)
	}
	// The same through the SDK (a progress token: not the fast path's).
	progress := `"_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	if resp, r := call("must", progress); resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32021 {
		t.Errorf("tools/call must without the extension, with a progress token: %d %s", resp.StatusCode, r.Raw)
	}
	if _, r := call("hidden-required", modernMeta); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("tools/call hidden-required without the extension: %s", r.Raw)
	}

	for id, want := range map[string]string{"running": "working", "done": "completed", "content": "completed", "toolerr": "completed", "badreply": "failed", "cancelled": "cancelled"} {
		_, r := task("tasks/get", id, nil)
		if r.Result["status"] != want || r.Result["taskId"] != id || r.Result["resultType"] != "complete" {
			t.Errorf("tasks/get %s: %s, want status %s", id, r.Raw, want)
		}
		res, _ := r.Result["result"].(map[string]any)
		e, _ := r.Result["error"].(map[string]any)
		switch id {
		case "done":
			if res == nil || res["isError"] == true || res["structuredContent"] == nil || e != nil {
				t.Errorf("tasks/get done: %s", r.Raw)
			}
		case "content":
			if b, _ := json.Marshal(res["content"]); res["isError"] == true || string(b) != `[{"text":"t","type":"text"}]` || e != nil {
				t.Errorf("tasks/get content: %s", r.Raw)
			}
		case "toolerr":
			if res == nil || res["isError"] != true || e != nil {
				t.Errorf("tasks/get toolerr: %s", r.Raw)
			}
		case "badreply":
			if res != nil || e == nil || e["code"] != float64(-32603) || e["message"] != "it went wrong" {
				t.Errorf("tasks/get badreply: %s", r.Raw)
			}
		default:
			if res != nil || e != nil {
				t.Errorf("tasks/get %s: %s", id, r.Raw)
			}
		}
	}
	if _, r := task("tasks/cancel", "running", nil); r.Error != nil || len(r.Result) != 2 || r.Result["resultType"] != "complete" {
		t.Errorf("tasks/cancel: %s, want an empty acknowledgement (and _meta)", r.Raw)
	}
	if _, r := task("tasks/update", "running", nil); r.Error != nil || r.Result["resultType"] != "complete" || r.Result["status"] != nil {
		t.Errorf("tasks/update: %s", r.Raw)
	}
	// Refusals: an unknown id (another caller's is the same), the routing
	// headers disagreeing with the body, the extension not declared.
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
		if resp, r := task(m, "nope", nil); resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("%s nope: %d %s", m, resp.StatusCode, r.Raw)
		}
	}
	if resp, r := task("tasks/get", "done", modern("tasks/get", "other")); resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32020 {
		t.Errorf("tasks/get with Mcp-Name other: %d %s", resp.StatusCode, r.Raw)
	}
	if _, r := task("tasks/get", "done", modern("tasks/cancel", "done")); r.Error == nil || r.Error.Code != -32020 {
		t.Errorf("tasks/get with Mcp-Method tasks/cancel: %s", r.Raw)
	}
	resp, r := post(t, url, modern("tasks/get", "done"), `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"done",`+modernMeta+`}}`)
	if resp.StatusCode != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32021 {
		t.Errorf("tasks/get without the extension: %d %s", resp.StatusCode, r.Raw)
	}
}
