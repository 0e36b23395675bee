// Package mcp serves the gateway's tools over the Model Context Protocol:
// a Streamable HTTP endpoint, stateless (every POST stands alone, so
// replicas behind a load balancer need no session affinity), built on the
// official Go SDK.
//
// It is a door like the others: every MCP request becomes calls
// (toolcall.Call) of the handler it is given — the middleware every door
// shares, then the core — with the HTTP request's header (credentials,
// request id, trace context) read by the same rule as the REST door's.
// Authentication, the access policy, rate limits, the call log, metrics
// and traces therefore apply unchanged; metrics and the call log name MCP
// calls' methods "mcp/InvokeTool", "mcp/ListTools", …. A request is
// authenticated once, when it arrives (Options.Authenticate), and its
// calls carry that caller.
//
//   - tools/list is ListTools: the tools the caller may list, a page of
//     PageSize at a time (the cursor is ListTools' page token), each with
//     its name, description and arguments_schema as inputSchema.
//   - tools/call is InvokeTool, or StreamTool when the request carries a
//     progress token (or wants the log records of a tool of MCP content):
//     each chunk is sent as notifications/progress (message = the chunk,
//     progress = its index + 1) and the result is the chunks joined. _meta.timeout ("5s", "200ms", or a number of seconds) sets
//     the call's deadline. The answer is one text content, plus
//     structuredContent when the output is a JSON object — or, for a tool
//     whose descriptor says "result": "mcp-content", the content blocks
//     of its output, its log records sent as notifications/message
//     (content.go).
//   - Failures of the tool call itself — bad arguments (the ToolService's
//     own check, which names the argument; nothing is published), the tool
//     service's error, a deadline, an unavailable service, a rate limit —
//     are tool results with isError: true, text "<type>: <message>" and
//     structuredContent {"error": {"type", "message", "code"}}, so that a
//     model can read them and correct itself. The type is the tool
//     service's Error.type, else the gateway's reason, else the gRPC code
//     in kebab case ("invalid-argument"). Refusals of the request — an
//     unknown tool, a tool the caller may not use, malformed arguments or
//     _meta — are JSON-RPC errors (-32602), as the MCP specification asks.
//   - notifications/cancelled (a POST of its own, from the same user and
//     address, naming the call's id: cancel.go), or the client going away,
//     cancels the call.
//
// A request goes through the pipeline of pipeline.go, a list of named
// steps (the checks, then what the endpoint answers itself, then the
// SDK); every JSON-RPC answer the endpoint writes itself is written by
// writeAnswer (answer.go).
package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/doorconf"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultPageSize is the number of tools in one tools/list page.
const DefaultPageSize = 100

// DefaultMaxCacheTTL is the gateway's default of Options.MaxCacheTTL.
const DefaultMaxCacheTTL = doorconf.MCPMaxCacheTTL

// modernVersion is the first protocol revision of stateless requests
// (per-request _meta, server/discover, resultType on every result).
const modernVersion = "2026-07-28"

// changedTool is a tool of the SDK's own registry that nobody sees (tools/list
// and tools/call are answered from the ToolService): adding it again is how
// ToolsChanged makes the SDK send notifications/tools/list_changed.
const changedTool = "toolgate.internal.tools-changed"

// Options configure a Server.
type Options struct {
	// Logger receives the SDK's and the handler's own log lines (calls are
	// logged by the ToolService's call log).
	Logger *slog.Logger
	// DefaultTimeout is the deadline of a tools/call without _meta.timeout;
	// zero leaves it to the ToolService (the tool service's timeout, else
	// the gateway's default).
	DefaultTimeout time.Duration
	// PageSize is the number of tools per tools/list page; zero means
	// DefaultPageSize.
	PageSize int32
	// Authenticate, when set, establishes the caller of every HTTP
	// request before the MCP layer sees it (auth.Authenticator's
	// Authenticate): its calls then carry that caller. A refusal is
	// answered with HTTP 401 (Unauthenticated; with WWW-Authenticate:
	// Bearer) or 403 (PermissionDenied), as the MCP authorization rules
	// ask of HTTP transports. Without it, a caller without credentials
	// learns of it from the first tools/list or tools/call instead.
	Authenticate func(ctx context.Context, c *toolcall.Call) error
	// Version is the server version reported to clients.
	Version string
	// AllowedOrigins are the browser origins besides the endpoint's own
	// that may call it ("*": any); a request without Origin (not from a
	// browser) is not checked.
	AllowedOrigins []string
	// CallerDependent says that what tools/list answers depends on the
	// caller — credentials are checked, or a policy decides who sees
	// which tools: the caching hint of list results is then cacheScope
	// "private" (only the caller's own client may keep them), else
	// "public".
	CallerDependent bool
	// MaxCacheTTL bounds the ttlMs caching hint of list results (protocol
	// 2026-07-28). The hint is a tenth of the time since the tool list
	// last changed (a list unchanged for an hour is likely to stay so a
	// while; one that just changed may change again), up to MaxCacheTTL;
	// zero makes every list immediately stale.
	MaxCacheTTL time.Duration
	// Resource is the endpoint's resource identifier for OAuth clients
	// (RFC 9728, RFC 8707): its canonical URL, as clients reach it
	// ("https://gateway.example.com/mcp"). When set, ResourceMetadata
	// serves the endpoint's protected resource metadata, and a request
	// refused with 401 points to it in its WWW-Authenticate challenge.
	// The tokens' audience is for Authenticate to check.
	Resource string
	// AuthorizationServers are the issuers (RFC 8414) of the tokens the
	// endpoint accepts, for its resource metadata.
	AuthorizationServers []string
	// Scopes are the scopes clients should ask for (the metadata's
	// scopes_supported and the challenge's scope).
	Scopes []string
	// Tasks serves the tasks extension (io.modelcontextprotocol/tasks) of
	// protocol 2026-07-28 over the gateway's durable operations (tasks.go):
	// the handler must serve them (--operations). server/discover then
	// declares the extension.
	Tasks bool
	// TaskSupport is the task support of a tool (registry.Tool.TaskSupport;
	// "" for an unknown tool). With Tasks.
	TaskSupport func(tool string) string
	// Result is the result format of a tool (registry.Tool.Result; "" for
	// an unknown tool): the output of a tool of registry.ResultMCPContent
	// is returned as MCP content, its log records sent as
	// notifications/message (content.go). Nil: every tool's output is
	// text.
	Result func(tool string) string
	// HeaderParams are the arguments of a tool that clients mirror into
	// Mcp-Param headers (registry.Tool.HeaderParams; nil for an unknown
	// tool): a tools/call of protocol 2026-07-28 whose headers do not
	// match its arguments is refused (headers.go). Nil: no tool has any.
	HeaderParams func(tool string) []registry.HeaderParam
	// TaskTTL is how long a task is kept once it ended (the operations'
	// TTL): the ttlMs of tasks.
	TaskTTL time.Duration
	// ContentBounds bound the output of a tool of MCP content (content.go):
	// a breach is a BAD_CONTENT tool error naming the bound. Zero fields
	// take their defaults (DefaultMaxContentBlocks, …).
	ContentBounds ContentBounds
	// MaxHeaderBytes bounds a request's header lines: larger ones are
	// refused with HTTP 431 and a JSON-RPC error before anything else is
	// done (<= 0: no bound). The body's limits are the HTTP listener's
	// (limits.HTTP); their refusals are answered here, 413 and 408.
	MaxHeaderBytes int
	// Name and Instructions are the server's name and instructions, as
	// initialize and server/discover give them (default: "toolgate" and
	// the gateway's own).
	Name         string
	Instructions string
	// Set is the tool set this endpoint serves (registry.ToolSet): every
	// call is made in it (toolcall.Call.Set), so tools/list holds its tools
	// alone, as it shows them, and tools/call of any other is an unknown
	// tool. "": the whole registry.
	Set string
	// NoFastPath sends every request through the SDK, even the stateless
	// tools/call the endpoint answers itself, the same, at a fraction of
	// the cost (fast.go). For tests and comparisons.
	NoFastPath bool
}

// Server is the MCP endpoint, an http.Handler. It is safe for concurrent
// use.
type Server struct {
	// changed is when the tool list last changed (UnixNano).
	changed  atomic.Int64
	inflight inflight
	h        toolcall.Handler
	opts     Options
	log      *slog.Logger
	mcp      *sdk.Server
	impl     *sdk.Implementation // the server's identity, as results of 2026-07-28 carry it
	implJSON []byte              // impl encoded, for the fast path
	handler  http.Handler
	pageSize int32
	bounds   ContentBounds // opts.ContentBounds with its defaults
}

// defaultInstructions are the instructions of the whole registry's server.
const defaultInstructions = "The tools of this toolgate gateway. tools/call accepts _meta.timeout (\"5s\") and streams " +
	"chunks as progress notifications when a progressToken is given."

// New returns the MCP endpoint serving calls through h.
func New(h toolcall.Handler, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{h: h, opts: opts, log: opts.Logger, pageSize: opts.PageSize, bounds: opts.ContentBounds.orDefaults()}
	s.changed.Store(time.Now().UnixNano())
	if s.pageSize <= 0 {
		s.pageSize = DefaultPageSize
	}
	// The SDK logs every stateless request's session at Info: keep its
	// warnings and errors only.
	sdkLog := slog.New(&minLevel{Handler: opts.Logger.Handler(), min: slog.LevelWarn})
	s.impl = &sdk.Implementation{Name: cmp.Or(opts.Name, "toolgate"), Version: opts.Version}
	s.implJSON, _ = json.Marshal(s.impl) // strings only: cannot fail
	s.mcp = sdk.NewServer(s.impl, &sdk.ServerOptions{
		Logger: sdkLog,
		// Logging: the log records of tools of MCP content are sent as
		// notifications/message (content.go), which the protocol asks a
		// server to declare.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}, Logging: &sdk.LoggingCapabilities{}},
		Instructions: cmp.Or(opts.Instructions, defaultInstructions),
		// server/discover (the lists the SDK would answer are refused:
		// see middleware).
		SetCacheable: func(_ context.Context, _ sdk.Request, c *sdk.Cacheable) { *c = s.cacheable() },
	})
	s.addChangedTool()
	s.mcp.AddReceivingMiddleware(s.middleware)
	s.handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{Stateless: true, Logger: sdkLog})
	return s
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h *minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h *minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return &minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h *minLevel) WithGroup(name string) slog.Handler {
	return &minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

// ToolsChanged tells the clients listening on this replica that the tool
// list changed: it sends notifications/tools/list_changed to every open
// subscriptions/listen stream (protocol 2026-07-28 and later). The endpoint
// is stateless, so there is no other channel to a client between its
// requests: clients of older protocol versions, and clients of other
// replicas, do not hear of it (each replica watches its own registry and
// notifies its own listeners), and re-list when they next need to.
func (s *Server) ToolsChanged() {
	s.changed.Store(time.Now().UnixNano())
	s.addChangedTool()
}

// cacheable is the caching hint of a list result: see
// Options.CallerDependent and Options.MaxCacheTTL.
func (s *Server) cacheable() sdk.Cacheable {
	c := sdk.Cacheable{CacheScope: "public"}
	if s.opts.CallerDependent {
		c.CacheScope = "private"
	}
	ttl := min(time.Since(time.Unix(0, s.changed.Load()))/10, s.opts.MaxCacheTTL)
	c.TTLMs = max(int(ttl.Milliseconds()), 0)
	return c
}

func (s *Server) addChangedTool() {
	s.mcp.AddTool(&sdk.Tool{Name: changedTool, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return nil, errors.New("not a tool")
		})
}

// requestKey holds, in the contexts the SDK gives handlers, the HTTP
// request they serve: they inherit its context's values (the connection of
// a stateless request is made from it) but not its cancellation.
type requestKey struct{}

// request is what an MCP request's calls inherit from it.
type request struct {
	ctx  context.Context // the HTTP request's own
	base toolcall.Call   // header, connection, and the caller once authenticated
	id   json.RawMessage // the JSON-RPC request's id, if read
	// progressToken is the request's _meta.progressToken as written (for
	// the SDK's requests, which read it as the SDK reads numbers: ids.go).
	progressToken json.RawMessage
	srv           *Server
	// within: the contexts of the request's calls descend from ctx (the
	// fast path's do; the SDK's do not).
	within bool
	// cancelled: the client cancelled the request (notifications/cancelled).
	// Its answer is then not sent, as the protocol asks: the response
	// ends without it.
	cancelled atomic.Bool
}

// originAllowed reports whether a browser page of origin may call: its
// own origin (scheme and host as the request reached the gateway) always
// may, others when Options.AllowedOrigins lists them ("*": any). The
// Origin check keeps a page on another site — or a DNS-rebound name —
// from driving the endpoint with a user's credentials.
func (s *Server) originAllowed(origin string, r *http.Request) bool {
	for _, o := range s.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) && (u.Scheme == "http" || u.Scheme == "https")
}

// notServed are the methods of features this endpoint does not serve (a
// gateway of tools has no prompts, resources or completions), which the
// SDK would answer with empty lists: they are refused as unknown methods,
// so that what is served is exactly what initialize and server/discover
// declare.
var notServed = map[string]bool{
	"prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true,
}

// middleware answers tools/list and tools/call from the ToolService,
// refuses the methods of features not served, and leaves everything else
// to the SDK.
func (s *Server) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if notServed[method] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
				Message: fmt.Sprintf("method %q is not served: this MCP endpoint serves tools only", method)}
		}
		switch method {
		case "server/discover":
			res, err := next(ctx, method, req)
			if d, ok := res.(*sdk.DiscoverResult); ok && err == nil && s.opts.Tasks && d.Capabilities != nil {
				caps := *d.Capabilities
				caps.Extensions = maps.Clone(caps.Extensions)
				if caps.Extensions == nil {
					caps.Extensions = map[string]any{}
				}
				caps.Extensions[TasksExtension] = map[string]any{}
				d.Capabilities = &caps
			}
			return res, err
		case "tools/list":
			if r, ok := req.(*sdk.ListToolsRequest); ok {
				return s.listTools(ctx, r)
			}
		case "tools/call":
			if r, ok := req.(*sdk.CallToolRequest); ok {
				return s.callTool(ctx, r)
			}
		}
		return next(ctx, method, req)
	}
}

// newCall is a call of the MCP request ctx belongs to, with a context
// that ends with the handler's (notifications/cancelled) or the HTTP
// request's, whichever ends first.
func newCall(ctx context.Context, op toolcall.Op, method string) (context.Context, *toolcall.Call, context.CancelFunc, error) {
	req, ok := ctx.Value(requestKey{}).(*request)
	if !ok {
		return nil, nil, nil, rpcError(codeInternal, "internal error: the request context is missing", nil)
	}
	c := req.base
	c.Op, c.Method = op, method
	ctx, cancel := context.WithCancel(ctx)
	stop := func() bool { return true }
	if !req.within {
		stop = context.AfterFunc(req.ctx, cancel)
	}
	if key, ok := callKey(req, req.id); ok && req.srv != nil && op != toolcall.OpListTools {
		remove := req.srv.inflight.add(key, func() {
			// Marked first: the call's answer, made once the call ends,
			// finds it so and is not sent.
			req.cancelled.Store(true)
			cancel()
		})
		return ctx, &c, func() { remove(); stop(); cancel() }, nil
	}
	return ctx, &c, func() { stop(); cancel() }, nil
}

func (s *Server) listTools(ctx context.Context, req *sdk.ListToolsRequest) (*sdk.ListToolsResult, error) {
	ctx, c, done, err := newCall(ctx, toolcall.OpListTools, "mcp/ListTools")
	if err != nil {
		return nil, err
	}
	defer done()
	c.PageSize = s.pageSize
	if req.Params != nil {
		c.PageToken = req.Params.Cursor
	}
	res, err := s.h(ctx, c, nil)
	if err != nil {
		return nil, requestError(err)
	}
	out := &sdk.ListToolsResult{Tools: make([]*sdk.Tool, 0, len(res.Details().Tools)), NextCursor: res.Details().NextPageToken, Cacheable: s.cacheable()}
	for _, t := range res.Details().Tools {
		out.Tools = append(out.Tools, toolOf(t))
	}
	return out, nil
}

// toolOf is a registry tool as MCP describes it.
func toolOf(t *registry.Tool) *sdk.Tool {
	var schema any = map[string]any{"type": "object"}
	if t.Schema != nil {
		schema = t.Schema
	}
	return &sdk.Tool{Name: t.Name, Description: t.Description, InputSchema: schema}
}

// Codes of the JSON-RPC errors this endpoint answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInvalidParams  = -32602
	codeInternal       = -32603
	// codeRefused is a request without acceptable credentials, in the
	// range JSON-RPC leaves to servers.
	codeRefused = -32001
)

// rpcError is a JSON-RPC error with data (the gRPC status it came from).
func rpcError(code int64, msg string, data map[string]any) error { return rpcErr(code, msg, data) }

// rpcErr is rpcError as the type the SDK's and writeAnswer's encoding
// takes.
func rpcErr(code int64, msg string, data map[string]any) *jsonrpc.Error {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data) // JSON values only: cannot fail
	}
	return &jsonrpc.Error{Code: code, Message: msg, Data: raw}
}

// requestError is the JSON-RPC error for a status that refuses the request
// itself (tools/list, or a tools/call the gateway turned away).
func requestError(err error) error {
	st := status.Convert(err)
	code := int64(codeInternal)
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied:
		code = codeInvalidParams
	case codes.Unauthenticated:
		code = codeRefused
	}
	data := map[string]any{"code": st.Code().String()}
	ei := errorInfo(toolcall.EnsureErrorInfo(st))
	data["reason"], data["domain"] = ei.GetReason(), ei.GetDomain()
	return rpcError(code, st.Message(), data)
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// kebab turns a gRPC code's name into an error type: InvalidArgument →
// invalid-argument.
func kebab(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// callError turns a failed call into the tools/call answer: a JSON-RPC
// error when the gateway refused the request (unknown tool, a tool the
// caller may not use, no credentials), else a tool result with isError.
func callError(err error) (*sdk.CallToolResult, error) {
	st := status.Convert(err)
	ei := errorInfo(st)
	switch st.Code() {
	case codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		// The gateway's own refusals (reasons in upper case: no such
		// tool, no credentials, not allowed) refuse the request; a tool
		// service's errors of these codes are the tool's answer.
		if ei == nil || ei.GetReason() == strings.ToUpper(ei.GetReason()) {
			return nil, requestError(err)
		}
	}
	typ := kebab(st.Code())
	if ei != nil && ei.GetReason() != "" {
		typ = ei.GetReason()
	}
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: typ + ": " + st.Message()}},
		StructuredContent: map[string]any{"error": map[string]any{
			"type": typ, "message": st.Message(), "code": st.Code().String(),
		}},
	}, nil
}
