package operations_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// mcpAnswer is a JSON-RPC answer of /mcp.
type mcpAnswer struct {
	status int
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

var mcpID int

// mcpRequest sends one request of protocol 2026-07-28 to the MCP endpoint
// at base as the holder of key (an API key, or "Bearer " and a JWT), with
// the routing headers a client sends
// (Mcp-Name: the tool, or the task id), declaring the tasks extension
// when tasks is true.
func mcpRequest(t *testing.T, base, key, method string, params map[string]any, tasks bool) mcpAnswer {
	t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": caps}
	mcpID++
	body := mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": mcpID, "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	h := req.Header
	if strings.HasPrefix(key, "Bearer ") {
		h.Set("Authorization", key)
	} else {
		h.Set("X-Api-Key", key)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("Mcp-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		h.Set("Mcp-Name", name)
	} else if id, ok := params["taskId"].(string); ok {
		h.Set("Mcp-Name", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				raw = []byte(d)
			}
		}
	} else {
		raw = mustRead(t, resp)
	}
	a := mcpAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s: %d, not a JSON-RPC answer: %q", method, resp.StatusCode, raw)
	}
	return a
}

func mustRead(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// wantTaskNotFound checks that a is the extension's refusal of an unknown
// task id (-32602), worded as for an id that never existed.
func wantTaskNotFound(t *testing.T, what string, a mcpAnswer, id string) {
	t.Helper()
	if a.Error == nil || a.Error.Code != -32602 || a.status != http.StatusBadRequest || a.Error.Message != "task "+id+" not found" {
		t.Fatalf("%s: %d %+v %v, want -32602 task not found", what, a.status, a.Error, a.Result)
	}
}

// TestMCPTaskAcrossGateways: a task started by an MCP client on gateway A
// (tools/call of a task-supporting tool, the tasks extension declared) is
// read, with its result inlined, through MCP on gateway B and through REST
// GET /v1/operations/{id}; another caller gets the not-found of an id that
// does not exist; a task cancelled on B is cancelled on A.
func TestMCPTaskAcrossGateways(t *testing.T) {
	flags := setup(t)
	a, b := apptest.Start(t, nil, flags...), apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	aBase, bBase := "http://"+a.HTTPAddr(), "http://"+b.HTTPAddr()

	msg := "task-" + brokertest.UniqueTopic("m")
	created := mcpRequest(t, aBase, aliceKey, "tools/call", map[string]any{"name": "echo-task",
		"arguments": map[string]any{"mode": "sleep", "ms": 1500, "msg": msg}}, true)
	r := created.Result
	id, _ := r["taskId"].(string)
	if created.Error != nil || r["resultType"] != "task" || id == "" || r["status"] != "working" || r["content"] != nil ||
		r["ttlMs"] != float64(24*time.Hour/time.Millisecond) {
		t.Fatalf("tools/call as a task: %d %+v %v", created.status, created.Error, r)
	}
	// Durable on creation: A answers for it at once.
	if got := mcpRequest(t, aBase, aliceKey, "tasks/get", map[string]any{"taskId": id}, true); got.Result["taskId"] != id || got.Result["status"] != "working" {
		t.Fatalf("tasks/get on A right after: %+v %v", got.Error, got.Result)
	}
	// Not bob's: the answer of an id that does not exist, on both.
	for _, base := range []string{aBase, bBase} {
		wantTaskNotFound(t, "bob's tasks/get on "+base, mcpRequest(t, base, bobKey, "tasks/get", map[string]any{"taskId": id}, true), id)
		wantTaskNotFound(t, "bob's tasks/cancel on "+base, mcpRequest(t, base, bobKey, "tasks/cancel", map[string]any{"taskId": id}, true), id)
	}
	wantTaskNotFound(t, "an unknown id", mcpRequest(t, bBase, aliceKey, "tasks/get", map[string]any{"taskId": "no-such-task"}, true), "no-such-task")
	// Without the extension declared, the task methods are refused.
	if got := mcpRequest(t, bBase, aliceKey, "tasks/get", map[string]any{"taskId": id}, false); got.Error == nil || got.Error.Code != -32021 {
		t.Fatalf("tasks/get without the extension: %+v %v, want -32021", got.Error, got.Result)
	}

	// B reports it done, the tool result inlined.
	var got mcpAnswer
	eventually.True(t, 30*time.Second, "B to report the task completed", func() bool {
		got = mcpRequest(t, bBase, aliceKey, "tasks/get", map[string]any{"taskId": id}, true)
		// Not found until B's table shows it (milliseconds after A's).
		return got.Result["status"] != nil && got.Result["status"] != "working"
	})
	res, _ := got.Result["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if got.Result["status"] != "completed" || got.Result["resultType"] != "complete" || len(content) != 1 ||
		content[0].(map[string]any)["text"] != msg || res["isError"] == true {
		t.Fatalf("tasks/get on B: %v", got.Result)
	}
	// The same operation on REST.
	code, op := do(t, http.MethodGet, bBase+"/v1/operations/"+id, aliceKey, "")
	if out, _ := op["response"].(map[string]any); code != http.StatusOK || op["done"] != true || out["output"] != msg {
		t.Fatalf("GET /v1/operations/%s on B: %d %v", id, code, op)
	}
	if code, e := do(t, http.MethodGet, bBase+"/v1/operations/"+id, bobKey, ""); code != http.StatusNotFound {
		t.Fatalf("bob's GET /v1/operations on B: %d %v", code, e)
	}

	// A tool that does not support tasks answers as a plain call.
	plain := mcpRequest(t, aBase, aliceKey, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "plain"}}, true)
	if pc, _ := plain.Result["content"].([]any); plain.Result["resultType"] != "complete" || plain.Result["taskId"] != nil || len(pc) != 1 {
		t.Fatalf("tools/call of echo: %+v %v", plain.Error, plain.Result)
	}
	// Nor does a client that did not declare the extension get a task.
	sync := mcpRequest(t, aBase, aliceKey, "tools/call", map[string]any{"name": "echo-task", "arguments": map[string]any{"msg": "sync"}}, false)
	if sc, _ := sync.Result["content"].([]any); sync.Result["resultType"] != "complete" || len(sc) != 1 || sc[0].(map[string]any)["text"] != "sync" {
		t.Fatalf("tools/call of echo-task without the extension: %+v %v", sync.Error, sync.Result)
	}

	// Cancel on B, seen on A and on REST.
	long := mcpRequest(t, aBase, aliceKey, "tools/call", map[string]any{"name": "echo-task",
		"arguments": map[string]any{"mode": "sleep", "ms": 20000, "msg": "never"}}, true)
	lid, _ := long.Result["taskId"].(string)
	if lid == "" {
		t.Fatalf("long task: %+v %v", long.Error, long.Result)
	}
	// B knows the task once its table has A's record (a moment later).
	eventually.True(t, 5*time.Second, "B to know the long task", func() bool {
		return mcpRequest(t, bBase, aliceKey, "tasks/get", map[string]any{"taskId": lid}, true).Result["status"] == "working"
	})
	ack := mcpRequest(t, bBase, aliceKey, "tasks/cancel", map[string]any{"taskId": lid}, true)
	if ack.Error != nil || ack.Result["resultType"] != "complete" || ack.Result["taskId"] != nil || ack.Result["status"] != nil {
		t.Fatalf("tasks/cancel on B: %+v %v", ack.Error, ack.Result)
	}
	eventually.True(t, 5*time.Second, "A to report the task cancelled", func() bool {
		got = mcpRequest(t, aBase, aliceKey, "tasks/get", map[string]any{"taskId": lid}, true)
		return got.Result["status"] == "cancelled"
	})
	if got.Result["result"] != nil || got.Result["error"] != nil {
		t.Fatalf("a cancelled task: %v", got.Result)
	}
	code, op = do(t, http.MethodGet, aBase+"/v1/operations/"+lid, aliceKey, "")
	if e, _ := op["error"].(map[string]any); code != http.StatusOK || op["done"] != true || e["code"] != float64(1) {
		t.Fatalf("GET /v1/operations/%s after the cancel: %d %v", lid, code, op)
	}
	// Cancelling again is the same acknowledgement.
	if again := mcpRequest(t, aBase, aliceKey, "tasks/cancel", map[string]any{"taskId": lid}, true); again.Error != nil || again.Result["resultType"] != "complete" {
		t.Fatalf("tasks/cancel again: %+v %v", again.Error, again.Result)
	}
}
