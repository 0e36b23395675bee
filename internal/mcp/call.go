package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/status"
)

// timeoutMeta is the _meta key of a tools/call's deadline.
const timeoutMeta = "timeout"

// callTool answers tools/call; from protocol 2026-07-28 on, its result
// says that it is complete (resultType).
func (s *Server) callTool(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	if req.Params != nil && modern(req.Session) && !sessionDeclaresTasks(req.Session) &&
		s.taskSupport(req.Params.Name) == registry.TaskRequired {
		return nil, s.missingTasks(ctx, req.Params.Name)
	}
	var meta map[string]any
	if req.Params != nil {
		meta = req.Params.GetMeta()
	}
	res, err := s.call(ctx, req, logThreshold(meta, modern(req.Session)))
	if err != nil || !modern(req.Session) {
		return res, err
	}
	return complete(res), nil
}

// modern reports whether the session's requests speak protocol 2026-07-28
// or later (a stateless request's _meta names its version; the fast path
// has no session and marks its 2026-07-28 results itself).
func modern(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.ProtocolVersion >= modernVersion
}

// completeResult is an empty result marked complete (resultType
// "complete"), which the SDK sets only on results of its own tool handlers
// and leaves no other way to set than its own decoding: decoded once, and
// copied (unexported field and all) for each result.
var completeResult = func() sdk.CallToolResult {
	var r sdk.CallToolResult
	if err := r.UnmarshalJSON([]byte(`{"resultType":"complete","content":[]}`)); err != nil {
		panic("mcp: decoding a constant result: " + err.Error()) // cannot happen
	}
	return r
}()

// complete is r marked as a complete result.
func complete(r *sdk.CallToolResult) *sdk.CallToolResult {
	out := completeResult
	out.Meta, out.Content, out.StructuredContent, out.IsError = r.Meta, r.Content, r.StructuredContent, r.IsError
	out.InputRequests, out.RequestState = r.InputRequests, r.RequestState
	return &out
}

// call runs a tools/call. logLevel is the least severe level of the log
// records the request wants (logThreshold; "" none): a call of a tool of
// MCP content that wants some is streamed, so that they reach the client
// while it runs.
func (s *Server) call(ctx context.Context, req *sdk.CallToolRequest, logLevel string) (*sdk.CallToolResult, error) {
	text, res, err := s.callText(ctx, req, logLevel)
	if err != nil || res != nil {
		return res, err
	}
	return result(text), nil
}

// callText is call, but for a tool whose answer is its output as one text
// content (result), which it returns as text with res nil: the fast path
// writes that result itself.
func (s *Server) callText(ctx context.Context, req *sdk.CallToolRequest, logLevel string) (text string, res *sdk.CallToolResult, err error) {
	p := req.Params
	if p == nil || p.Name == "" {
		return "", nil, rpcError(codeInvalidParams, "tools/call needs the name of a tool", nil)
	}
	content := s.resultFormat(p.Name) == registry.ResultMCPContent
	if !content {
		logLevel = ""
	}
	op, method := toolcall.OpInvoke, "mcp/InvokeTool"
	token := p.GetProgressToken()
	if r, ok := ctx.Value(requestKey{}).(*request); ok && token != nil && r.progressToken != nil {
		token = r.progressToken // as the client wrote it: the SDK reads numbers as float64
	}
	if token != nil || logLevel != "" {
		op, method = toolcall.OpStream, "mcp/StreamTool"
	}
	ctx, c, done, err := newCall(ctx, op, method)
	if err != nil {
		return "", nil, err
	}
	defer done()
	c.Name = p.Name
	if err := callArgs(c, p.Arguments); err != nil {
		return "", nil, err
	}
	if err := s.timeout(c, p.GetMeta()); err != nil {
		return "", nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	if err := traceMeta(c, p.GetMeta()); err != nil {
		return "", nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	if op == toolcall.OpStream {
		res, err := s.stream(ctx, c, req.Session, token, content, logLevel)
		return "", res, err
	}
	out, err := s.h(ctx, c, nil)
	if err != nil {
		res, err := callError(err)
		return "", res, err
	}
	if content {
		return "", s.contentResult(ctx, c.ShownName(), out.Output), nil
	}
	return out.Output, nil, nil
}

// callArgs sets the arguments of c: a JSON object, or none.
func callArgs(c *toolcall.Call, raw json.RawMessage) error {
	if args := bytes.TrimSpace(raw); len(args) > 0 && string(args) != "null" {
		if args[0] != '{' {
			return rpcError(codeInvalidParams, "arguments must be a JSON object", nil)
		}
		c.Args = args
	}
	return nil
}

// result is a tool's output as a tools/call result: one text content,
// and the output itself as structuredContent when it is a JSON object
// (structured).
func result(output string) *sdk.CallToolResult {
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: output}}}
	if t := strings.TrimSpace(output); structured(t) {
		res.StructuredContent = json.RawMessage(t)
	}
	return res
}

// structured reports whether a tool's output (trimmed) is also given as
// structuredContent: a JSON object nested no deeper than
// DefaultMaxContentDepth. The output comes from the bus; one nested
// thousands deep would be forwarded as JSON that clients cannot decode
// (Python's recurses), so it is given as text alone.
func structured(t string) bool {
	if !strings.HasPrefix(t, "{") {
		return false
	}
	return jsontext.ValidString(t) && !nestsDeeper(t, DefaultMaxContentDepth)
}

// traceMeta makes the W3C trace context a request carries in _meta
// (traceparent, tracestate: SEP-414) the call's, as the HTTP headers of
// that name would be; _meta wins over the headers, being the request's
// own.
func traceMeta(c *toolcall.Call, meta map[string]any) error {
	var o metaTrace
	for _, k := range []string{"traceparent", "tracestate"} {
		v, ok := meta[k]
		if !ok || v == nil {
			continue
		}
		sv, isString := v.(string)
		if !isString {
			return fmt.Errorf("_meta.%s must be a string, not %T", k, v)
		}
		if k == "traceparent" {
			o.parent = []string{sv}
		} else {
			o.state = []string{sv}
		}
	}
	if o.parent == nil {
		// A tracestate belongs to its traceparent: alone, it is dropped.
		return nil
	}
	o.Header = c.Header
	c.Header = o
	return nil
}

// metaTrace is a call's header with the trace context of _meta.
type metaTrace struct {
	toolcall.Header
	parent, state []string
}

func (h metaTrace) Values(key string) []string {
	switch key {
	case "traceparent":
		return h.parent
	case "tracestate":
		return h.state
	}
	return h.Header.Values(key)
}

// timeout reads _meta.timeout: a duration string ("5s", "0.25s", "200ms",
// "1m30s") or a number of seconds. Without it the call gets
// Options.DefaultTimeout, or none (the core decides).
func (s *Server) timeout(c *toolcall.Call, meta map[string]any) error {
	v, ok := meta[timeoutMeta]
	if !ok || v == nil {
		if s.opts.DefaultTimeout > 0 {
			c.Timeout, c.TimeoutSet = s.opts.DefaultTimeout, true
		}
		return nil
	}
	var d time.Duration
	switch t := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(t)); err != nil {
			return fmt.Errorf("_meta.timeout %q is not a duration such as \"5s\" or \"200ms\"", t)
		}
	case float64:
		if math.IsNaN(t) || t > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("_meta.timeout %v is out of range", t)
		}
		d = time.Duration(t * float64(time.Second))
	default:
		return fmt.Errorf("_meta.timeout must be a duration string (\"5s\") or a number of seconds, not %T", v)
	}
	if d <= 0 {
		return fmt.Errorf("_meta.timeout must be positive, got %v", v)
	}
	c.Timeout, c.TimeoutSet = d, true
	return nil
}

// stream runs a streaming call: each chunk is sent to the client as a
// progress notification when there is a progress token — but a log record
// of a tool of MCP content (content), which is sent as
// notifications/message when its level is logLevel or above — and the
// answer is the chunks joined.
func (s *Server) stream(ctx context.Context, c *toolcall.Call, session *sdk.ServerSession, token any, content bool, logLevel string) (*sdk.CallToolResult, error) {
	var out strings.Builder
	overflow := 0 // the size of a content output past its bound, whose text is no longer kept
	emit := func(ch toolcall.Chunk) error {
		switch {
		case !content:
			out.WriteString(ch.Text)
		case overflow > 0 || out.Len()+len(ch.Text) > s.bounds.Bytes:
			overflow = max(overflow, out.Len()) + len(ch.Text)
			out.Reset() // what was kept is of no more use
		default:
			out.WriteString(ch.Text)
		}
		if content {
			if rec, ok := logChunk(ch.Text, s.bounds); ok {
				if !wantLog(rec.Level, logLevel) {
					return nil
				}
				if err := session.Log(ctx, rec); err != nil {
					return fmt.Errorf("sending a log record: %w", err)
				}
				return nil
			}
		}
		if token == nil {
			return nil
		}
		err := session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
			ProgressToken: token, Progress: float64(ch.Index + 1), Message: ch.Text})
		if err != nil {
			return fmt.Errorf("sending progress: %w", err)
		}
		return nil
	}
	if _, err := s.h(ctx, c, emit); err != nil {
		if _, isStatus := status.FromError(err); ctx.Err() == nil && !isStatus {
			// The client stopped taking notifications.
			s.log.DebugContext(ctx, "MCP stream ended", "tool", c.Name, "err", err)
		}
		return callError(err)
	}
	if overflow > 0 {
		return s.refuseContent(ctx, c.ShownName(), s.bounds.errTooLarge(overflow)), nil
	}
	return s.toolResult(ctx, c.Name, c.ShownName(), out.String()), nil
}
