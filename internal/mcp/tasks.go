package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The tasks extension (io.modelcontextprotocol/tasks, SEP-2663) of protocol
// 2026-07-28, served over the gateway's durable operations: a task is an
// operation (its id the operation's), started by OpStartTool and read,
// cancelled through the same calls of the core the REST and gRPC doors
// make, so that any gateway of the deployment answers for it, to the
// caller who started it alone (another caller's task is "not found",
// exactly as an id that does not exist).
//
// The server decides which calls become tasks: a tools/call of a tool
// whose descriptor says "task-support": "optional" or "required", from a
// request whose _meta client capabilities declare the extension. A
// required tool called without it is refused with -32021 (missing
// required client capability). tasks/get answers the task, with the tool
// result inlined once it is done; tasks/cancel records it cancelled;
// tasks/update is acknowledged (a tool service never asks the client for
// input, so no input is ever pending and every response is one the task
// did not ask for). The extension has no tasks/result or tasks/list: they
// are unknown methods, as the SDK answers them.
//
// These requests are answered here, before the SDK (which knows nothing of
// tasks), and only when every header and _meta field the SDK would check
// is in order (taskCertain); a tools/call that is not is the SDK's, and
// then runs as a plain call.

// TasksExtension is the extension's identifier in capabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// codeHeaderMismatch is SEP-2243's error for a request header that does
// not agree with the body.
const codeHeaderMismatch = -32020

// DefaultTaskPollInterval is the pollIntervalMs tasks suggest.
const DefaultTaskPollInterval = 500 * time.Millisecond

// taskRequest is a JSON-RPC request of the tasks surface.
type taskRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		TaskID    any             `json:"taskId"`
		Meta      map[string]any  `json:"_meta"`
	} `json:"params"`
}

// taskMethods are the methods served here.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/cancel": true, "tasks/update": true}

// declaresTasks reports whether client capabilities (as _meta carries
// them) declare the tasks extension.
func declaresTasks(caps any) bool {
	m, _ := caps.(map[string]any)
	ext, _ := m["extensions"].(map[string]any)
	_, ok := ext[TasksExtension]
	return ok
}

// sessionDeclaresTasks is declaresTasks for a request the SDK decoded.
func sessionDeclaresTasks(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil {
		return false
	}
	_, ok := p.Capabilities.Extensions[TasksExtension]
	return ok
}

// taskSupport is the task support of the tool name ("" when tasks are not
// served or the tool is unknown).
func (s *Server) taskSupport(name string) string {
	if !s.opts.Tasks || s.opts.TaskSupport == nil {
		return registry.TaskForbidden
	}
	return s.opts.TaskSupport(name)
}

// missingTasks is the refusal of a call of a tool that runs only as a task
// from a client that did not declare the extension — once the caller may
// see the tool at all (else the refusal of an unknown tool, so that the
// answer tells nothing of tools the caller may not see).
func (s *Server) missingTasks(ctx context.Context, name string) error {
	ctx, c, done, err := newCall(ctx, toolcall.OpGetTool, "mcp/GetTool")
	if err != nil {
		return err
	}
	defer done()
	c.Name = name
	if _, err := s.h(ctx, c, nil); err != nil {
		return requestError(err)
	}
	return missingTasksError("tool " + name + " runs only as a task: declare the " + TasksExtension + " extension in the client capabilities")
}

// missingTasksError is SEP-2575's missing required client capability
// error, naming the tasks extension (the SDK's ClientCapabilities would add
// an empty "roots").
func missingTasksError(msg string) error {
	return &jsonrpc.Error{Code: sdk.CodeMissingRequiredClientCapabilities, Message: msg,
		Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}`)}
}

// serveTask answers the request when it is one of the tasks surface this
// endpoint answers itself, and reports whether it did.
func (s *Server) serveTask(x *exchange) bool {
	w, r, body, req := x.w, x.r, x.body, &x.req
	if !s.opts.Tasks || r.Header.Get("Mcp-Protocol-Version") != modernVersion || !fastEligible(r) ||
		len(body) == 0 || body[0] != '{' || len(body) > sdk.DefaultMaxRequestBodyBytes || tooDeep(body) {
		return false
	}
	var in taskRequest
	if json.Unmarshal(body, &in) != nil || in.JSONRPC != "2.0" || !echoable(in.ID) || in.Params == nil {
		return false
	}
	ctx := context.WithValue(r.Context(), requestKey{}, req)
	req.id = in.ID
	switch {
	case in.Method == "tools/call":
		// A task when the tool supports one and the client can take it,
		// and the SDK would take the request; anything else is the SDK's
		// (or the fast path's) to answer, as a plain call.
		if s.taskSupport(in.Params.Name) == registry.TaskForbidden || !declaresTasks(in.Params.Meta[sdk.MetaKeyClientCapabilities]) ||
			hasProgressToken(in.Params.Meta) || hasUnknownKeys(body) || !s.modernCertain(r, in.Params.Name, in.Params.Meta) {
			return false
		}
		res, err := s.startTask(ctx, in.Params.Name, in.Params.Arguments, in.Params.Meta)
		s.writeTaskAnswer(w, in.ID, res, err)
		return true
	case taskMethods[in.Method]:
		res, err := s.taskMethod(ctx, r, &in)
		s.writeTaskAnswer(w, in.ID, res, err)
		return true
	}
	return false
}

func hasProgressToken(meta map[string]any) bool {
	_, ok := meta["progressToken"]
	return ok
}

// taskMethod answers tasks/get, tasks/cancel and tasks/update after the
// checks the SDK makes of any request of protocol 2026-07-28 (the routing
// headers, _meta) and the extension's own (declared by the client, a task
// id).
func (s *Server) taskMethod(ctx context.Context, r *http.Request, in *taskRequest) (any, error) {
	p := in.Params
	id, isString := p.TaskID.(string)
	if !oneValue(r.Header, "Mcp-Method", in.Method) {
		return nil, &jsonrpc.Error{Code: codeHeaderMismatch, Message: "the Mcp-Method header must be the request's method, " + in.Method}
	}
	if !isString || !oneValue(r.Header, "Mcp-Name", id) {
		return nil, &jsonrpc.Error{Code: codeHeaderMismatch, Message: "the Mcp-Name header must be the request's taskId"}
	}
	if v, ok := p.Meta[sdk.MetaKeyProtocolVersion].(string); !ok || v != modernVersion {
		return nil, rpcError(codeInvalidParams, "_meta must name protocol version "+modernVersion+" ("+sdk.MetaKeyProtocolVersion+")", nil)
	}
	caps, ok := p.Meta[sdk.MetaKeyClientCapabilities].(map[string]any)
	if !ok || (len(caps) > 0 && !decodesAs[clientCapabilities](caps)) {
		return nil, rpcError(codeInvalidParams, "missing or invalid _meta field "+sdk.MetaKeyClientCapabilities, nil)
	}
	if !declaresTasks(caps) {
		return nil, missingTasksError(in.Method + " needs the " + TasksExtension + " extension declared in the client capabilities")
	}
	if id == "" {
		return nil, rpcError(codeInvalidParams, in.Method+" needs a taskId", nil)
	}
	op, method := toolcall.OpGetOperation, "mcp/GetOperation"
	if in.Method == "tasks/cancel" {
		op, method = toolcall.OpCancelOperation, "mcp/CancelOperation"
	}
	ctx, c, done, err := newCall(ctx, op, method)
	if err != nil {
		return nil, err
	}
	defer done()
	c.Name = id
	res, err := s.h(ctx, c, nil)
	if err != nil {
		return nil, taskError(err, id)
	}
	if in.Method == "tasks/get" {
		return s.detailedTask(ctx, res.Details().Operation), nil
	}
	// tasks/cancel and tasks/update are acknowledged with an empty
	// result; the task's state is tasks/get's to tell.
	return map[string]any{"resultType": "complete"}, nil
}

// taskError is the JSON-RPC error of a failed task request: an operation
// that is not the caller's is -32602, as the extension asks of an unknown
// task id.
func taskError(err error, id string) error {
	st := status.Convert(err)
	if st.Code() == codes.NotFound {
		return rpcError(codeInvalidParams, "task "+id+" not found", map[string]any{"code": st.Code().String(), "reason": toolcall.ReasonOperationNotFound})
	}
	return requestError(err)
}

// startTask starts a tools/call as a task: its CreateTaskResult, or the
// call's refusal (a tool result with isError for the failures tools/call
// reports so, such as a rate limit).
func (s *Server) startTask(ctx context.Context, name string, args json.RawMessage, meta map[string]any) (any, error) {
	ctx, c, done, err := newCall(ctx, toolcall.OpStartTool, "mcp/StartTool")
	if err != nil {
		return nil, err
	}
	defer done()
	c.Name = name
	if err := callArgs(c, args); err != nil {
		return nil, err
	}
	if err := s.timeout(c, meta); err != nil {
		return nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	if err := traceMeta(c, meta); err != nil {
		return nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	res, err := s.h(ctx, c, nil)
	if err != nil {
		r, err := callError(err)
		if err != nil {
			return nil, err
		}
		return complete(r), nil
	}
	t := s.task(res.Details().Operation)
	t["resultType"] = "task"
	return t, nil
}

// task is the Task fields of op.
func (s *Server) task(op *toolcall.Operation) map[string]any {
	updated := op.Created
	if !op.Ended.IsZero() {
		updated = op.Ended
	}
	t := map[string]any{
		"taskId":         op.ID,
		"status":         "working",
		"createdAt":      op.Created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  updated.UTC().Format(time.RFC3339Nano),
		"ttlMs":          s.opts.TaskTTL.Milliseconds(),
		"pollIntervalMs": DefaultTaskPollInterval.Milliseconds(),
	}
	if s.opts.TaskTTL <= 0 {
		t["ttlMs"] = nil
	}
	return t
}

// gatewayFailures are the reasons of an operation's failure that are the
// gateway's (the reply could not be taken), not the tool's: a task that
// ends so has failed; every other failure (the tool service's error, its
// deadline) is the tool's result with isError, as tools/call reports it.
var gatewayFailures = map[string]bool{"REPLY_LOST": true, "BAD_REPLY": true, "OUTPUT_TOO_LARGE": true}

// detailedTask is tasks/get's answer: the task, with its result or error
// once it ended.
func (s *Server) detailedTask(ctx context.Context, op *toolcall.Operation) map[string]any {
	t := s.task(op)
	t["resultType"] = "complete"
	switch {
	case !op.Done:
	case op.State == "cancelled":
		t["status"] = "cancelled"
		t["statusMessage"] = "the task was cancelled"
	case op.Err == nil:
		t["status"] = "completed"
		t["result"] = s.toolResult(ctx, op.Tool, op.Tool, op.Output)
	default:
		st := status.Convert(op.Err)
		reason := ""
		if ei := errorInfo(st); ei != nil {
			reason = ei.GetReason()
		}
		r, err := callError(op.Err)
		if !gatewayFailures[reason] && err == nil {
			t["status"] = "completed"
			t["result"] = r
			break
		}
		t["status"] = "failed"
		t["statusMessage"] = st.Message()
		t["error"] = map[string]any{"code": codeInternal, "message": st.Message(), "data": map[string]any{"code": st.Code().String(), "reason": reason}}
	}
	return t
}

// writeTaskAnswer writes the answer to request id as the SDK answers a
// request of protocol 2026-07-28: a result, with the server's identity in
// its _meta, as one event of a stream; a refusal as a plain JSON-RPC error
// with its HTTP status.
func (s *Server) writeTaskAnswer(w http.ResponseWriter, id json.RawMessage, res any, err error) {
	msg := startAnswer(id, 512)
	if err == nil {
		switch v := res.(type) {
		case map[string]any:
			v["_meta"] = map[string]any{sdk.MetaKeyServerInfo: s.impl}
		case *sdk.CallToolResult:
			if v.Meta == nil {
				v.Meta = sdk.Meta{}
			}
			v.Meta[sdk.MetaKeyServerInfo] = s.impl
		}
		var out []byte
		if out, err = json.Marshal(res); err == nil {
			msg = appendResult(msg, out)
		}
	}
	httpStatus := http.StatusOK
	if err != nil {
		e := asRPCError(err)
		msg = appendError(msg, e)
		httpStatus = modernErrorStatus(e.Code)
		if e.Code == codeHeaderMismatch {
			httpStatus = http.StatusBadRequest
		}
	}
	writeAnswer(w, httpStatus, msg, likeSDK)
}
