// Package httpapi is the REST door and the rest of the gateway's HTTP
// side. The REST API's routes (Go's http.ServeMux method patterns) turn
// each request into a toolcall.Call and run it through the call handler —
// the middleware every door shares, then the core: POST
// /v1/tools/{name}:invoke answers the output as JSON, :stream writes the
// chunks as NDJSON or Server-Sent Events as they arrive, and the listing
// GETs answer the API's messages in grpc-gateway's JSON form. Errors are
// the google.rpc.Status JSON with the HTTP status grpc-gateway maps the
// gRPC code to. It also serves health, readiness, the OpenAPI documents
// and whatever else the gateway mounts (metrics, docs, MCP), and owns
// HTTP semantics: 404 and 405 with Allow, HEAD, CORS, header size, media
// types (one Accept rule for every API answer, 406 and 415; media.go),
// and JSON bodies for every error. The Connect door is mounted here too.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/rs/cors"
	specs "github.com/toolgate/toolgate/api"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/openapi31"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReadyFunc reports whether the gateway can serve calls, with details;
// nil details leave them out of /readyz's answer.
type ReadyFunc func(ctx context.Context) (ready bool, details map[string]any)

// ErrorDomain is the ErrorInfo domain of errors the HTTP side raises.
const ErrorDomain = "toolgate"

// DefaultSSEHeartbeat is the default of Options.SSEHeartbeat.
const DefaultSSEHeartbeat = 15 * time.Second

// Options configure the handler.
type Options struct {
	Logger *slog.Logger
	Ready  ReadyFunc
	// Handler serves every call: the middleware chain around the core.
	Handler toolcall.Handler
	// ErrorHandler writes an error answer (default:
	// runtime.DefaultHTTPErrorHandler, grpc-gateway's mapping of the gRPC
	// code to the HTTP status).
	ErrorHandler runtime.ErrorHandlerFunc
	// SSEHeartbeat is how long an SSE stream may stay quiet before a
	// keep-alive comment is sent (DefaultSSEHeartbeat; negative: never).
	SSEHeartbeat time.Duration
	// CORSOrigins are the origins a browser may call from ("*" for any);
	// none turns CORS off.
	CORSOrigins []string
	// MaxHeaderBytes bounds a request's header lines; larger requests get
	// 431 (<= 0: no bound). The MCP and Connect handlers check their own
	// requests, to answer in their own forms. The http.Server's own limit
	// must be higher, or it answers first, in plain text.
	MaxHeaderBytes int
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// Docs, when set, is served at /docs and below; / redirects there.
	Docs http.Handler
	// MCP, when set, is served at /mcp (the Model Context Protocol
	// endpoint); it checks its own methods.
	MCP http.Handler
	// MCPSets, when set, is served at /mcp/{set}: each tool set's MCP
	// endpoint.
	MCPSets http.Handler
	// MCPResourceMetadata, when set, is served at
	// /.well-known/oauth-protected-resource and at that path followed by
	// /mcp: the MCP endpoint's OAuth protected resource metadata
	// (RFC 9728).
	MCPResourceMetadata http.Handler
	// Connect, when set, serves POST requests under ConnectPath (the
	// Connect door: Connect, gRPC-Web and gRPC for the ToolService).
	Connect     http.Handler
	ConnectPath string
	// Operations says the gateway serves durable operations
	// (--operations): only then do the OpenAPI documents list StartTool
	// and the routes of /v1/operations.
	Operations bool
}

// api is the handler New returns.
type api struct {
	opts Options
	// The OpenAPI documents served: the committed ones, less what this
	// gateway does not serve.
	spec, specV2 []byte
	mux          *http.ServeMux
	gw           *runtime.ServeMux // holds the error handler runtime.HTTPError uses
	m            *marshaler
}

// New returns the HTTP handler.
func New(opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Handler == nil {
		return nil, fmt.Errorf("httpapi: no call handler to serve")
	}
	if opts.SSEHeartbeat == 0 {
		opts.SSEHeartbeat = DefaultSSEHeartbeat
	}
	a := &api{opts: opts, m: newMarshaler(), mux: http.NewServeMux(), spec: specs.Spec, specV2: specs.SpecV2}
	if !opts.Operations {
		var err error
		if a.spec, err = openapi31.WithoutOperations(specs.Spec); err != nil {
			return nil, fmt.Errorf("httpapi: the OpenAPI document: %w", err)
		}
		if a.specV2, err = openapi31.WithoutOperations(specs.SpecV2); err != nil {
			return nil, fmt.Errorf("httpapi: the Swagger document: %w", err)
		}
	}
	var gwOpts []runtime.ServeMuxOption
	if opts.ErrorHandler != nil {
		gwOpts = append(gwOpts, runtime.WithErrorHandler(opts.ErrorHandler))
	}
	a.gw = runtime.NewServeMux(gwOpts...)
	a.routes()
	var h http.Handler = a
	if len(opts.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: opts.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", "X-Api-Key", "X-Request-Id", "Traceparent", "Tracestate",
				"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id",
				"Connect-Protocol-Version", "Connect-Timeout-Ms", "Grpc-Timeout", "X-Grpc-Web", "X-User-Agent"},
			ExposedHeaders: []string{"X-Request-Id", "Retry-After", "Mcp-Session-Id", "Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"},
			MaxAge:         600,
		}).Handler(h)
	}
	return h, nil
}

// routes registers every route. GET patterns serve HEAD too; what no
// pattern matches goes to unrouted, which answers 404 or 405 in JSON.
func (a *api) routes() {
	m := a.mux
	m.HandleFunc("GET /v1/tools", a.listTools)
	m.HandleFunc("GET /v1/tools/{name}", a.getTool)
	m.HandleFunc("POST /v1/tools/{call}", a.toolVerb)
	m.HandleFunc("GET /v1/operations", a.listOperations)
	m.HandleFunc("GET /v1/operations/{id}", a.getOperation)
	m.HandleFunc("DELETE /v1/operations/{id}", a.deleteOperation)
	m.HandleFunc("POST /v1/operations/{call}", a.operationVerb)
	m.HandleFunc("GET /v1/tool-services", a.listServices)
	m.HandleFunc("GET /v1/tool-services/{id}", a.getService)
	m.HandleFunc("GET /healthz", a.healthz)
	m.HandleFunc("GET /readyz", a.readyz)
	spec, v2 := specHandler(a.spec), specHandler(a.specV2)
	m.Handle("GET /openapi.json", spec)
	m.Handle("GET /v1/openapi.json", spec)
	m.Handle("GET /openapi.v2.json", v2)
	if a.opts.Metrics != nil {
		m.Handle("GET /metrics", a.opts.Metrics)
	}
	if a.opts.Docs != nil {
		m.Handle("GET /{$}", http.RedirectHandler("/docs", http.StatusFound))
		m.Handle("GET /docs", a.opts.Docs)
		m.Handle("GET /docs/", a.opts.Docs)
		m.Handle("GET /favicon.ico", a.opts.Docs) // the pages' icon: browsers ask on every load
	}
	if a.opts.MCP != nil {
		for _, method := range []string{"GET", "POST", "DELETE"} {
			m.Handle(method+" /mcp", a.opts.MCP)
			if a.opts.MCPSets != nil {
				m.Handle(method+" /mcp/{set}", a.opts.MCPSets)
			}
		}
	}
	if a.opts.MCPResourceMetadata != nil {
		for _, p := range wellKnown {
			m.Handle("GET "+p, a.opts.MCPResourceMetadata)
			m.Handle("OPTIONS "+p, a.opts.MCPResourceMetadata) // browsers' preflight
		}
	}
	if a.opts.Connect != nil {
		m.Handle("POST "+a.opts.ConnectPath, a.opts.Connect)
	}
	m.HandleFunc("/", a.unrouted)
}

// wellKnown are the paths of the MCP endpoint's resource metadata: the
// RFC 9728 form for a resource at /mcp, and the one without the path.
var wellKnown = [2]string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}

func specHandler(b []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.opts.MaxHeaderBytes > 0 && !a.checksOwnHeaders(r.URL.Path) {
		if n := httpcall.HeaderBytes(r); n > a.opts.MaxHeaderBytes {
			a.opts.Logger.InfoContext(r.Context(), "request refused: headers too large", "method", r.Method, "path", r.URL.Path,
				"peer", r.RemoteAddr, "bytes", n, "limit", a.opts.MaxHeaderBytes)
			w.Header().Set("Connection", "close")
			writeStatusOf(w, http.StatusRequestHeaderFieldsTooLarge, status.Convert(toolcall.HeadersTooLarge(n, a.opts.MaxHeaderBytes)))
			return
		}
	}
	a.mux.ServeHTTP(w, r)
}

// checksOwnHeaders reports whether path is a door's that checks its
// requests' headers itself (MCP, Connect).
func (a *api) checksOwnHeaders(path string) bool {
	return (a.opts.MCP != nil && path == "/mcp") || (a.opts.Connect != nil && strings.HasPrefix(path, a.opts.ConnectPath))
}

// unrouted answers a request no route takes: 405 with Allow when the path
// is one of ours under another method, else 404.
func (a *api) unrouted(w http.ResponseWriter, r *http.Request) {
	if allow := a.allowed(r.URL.Path); allow != "" {
		notAllowed(w, r, allow)
		return
	}
	writeStatus(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND",
		fmt.Sprintf("no such path: %s (the API is under /v1/; see /openapi.json)", r.URL.Path), nil)
}

// allowed lists the methods a path of ours takes, "" for a path that is
// not one.
func (a *api) allowed(path string) string {
	const get = "GET, HEAD"
	switch path {
	case "/v1/tools", "/v1/tool-services", "/v1/operations", "/healthz", "/readyz", "/openapi.json", "/v1/openapi.json", "/openapi.v2.json":
		return get
	case "/metrics":
		if a.opts.Metrics != nil {
			return get
		}
	case "/", "/favicon.ico":
		if a.opts.Docs != nil {
			return get
		}
	case "/mcp":
		if a.opts.MCP != nil {
			return "GET, HEAD, POST, DELETE"
		}
	case wellKnown[0], wellKnown[1]:
		if a.opts.MCPResourceMetadata != nil {
			return "GET, HEAD, OPTIONS"
		}
	}
	if a.opts.Docs != nil && (path == "/docs" || strings.HasPrefix(path, "/docs/")) {
		return get
	}
	if a.opts.Connect != nil && strings.HasPrefix(path, a.opts.ConnectPath) {
		return http.MethodPost
	}
	if rest, ok := strings.CutPrefix(path, "/v1/operations/"); ok && rest != "" && !strings.Contains(rest, "/") {
		if _, verb := splitOpVerb(rest); verb != "" {
			return http.MethodPost
		}
		if strings.HasSuffix(rest, ":"+verbStream) {
			return get
		}
		return "GET, HEAD, DELETE"
	}
	if rest, ok := strings.CutPrefix(path, "/v1/tool-services/"); ok && rest != "" && !strings.Contains(rest, "/") {
		return get
	}
	if rest, ok := strings.CutPrefix(path, "/v1/tools/"); ok && rest != "" && !strings.Contains(rest, "/") {
		if _, verb := splitVerb(rest); verb != "" {
			return http.MethodPost
		}
		return get
	}
	return ""
}

func notAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, "METHOD_NOT_ALLOWED",
		fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow), map[string]string{"allow": allow})
}

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ok, details := true, map[string]any{}
	if a.opts.Ready != nil {
		ok, details = a.opts.Ready(r.Context())
	}
	code, st := http.StatusOK, "ready"
	if !ok {
		code, st = http.StatusServiceUnavailable, "not ready"
	}
	body := map[string]any{"status": st}
	if details != nil {
		body["details"] = details
	}
	writeJSON(w, code, body)
}

// writeStatus answers an error raised by the HTTP side itself with the
// same google.rpc.Status body the API's errors have.
func writeStatus(w http.ResponseWriter, httpCode int, code codes.Code, reason, msg string, md map[string]string) {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = ds
	}
	writeStatusOf(w, httpCode, st)
}

// writeStatusOf answers st with httpCode, as writeStatus does.
func writeStatusOf(w http.ResponseWriter, httpCode int, st *status.Status) {
	body, err := newMarshaler().Marshal(st.Proto())
	if err != nil {
		body = []byte(fmt.Sprintf(`{"code":%d,"message":%q}`, st.Code(), st.Message()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
