// Package httpapi serves toolgate's HTTP side: the REST API (grpc-gateway's
// translation of HTTP/JSON to the ToolService for unary methods, and a
// handler of its own for the streaming one, both in process through the
// same interceptor chain as gRPC), health endpoints, the OpenAPI
// documents, and whatever else the gateway mounts (metrics, docs, MCP).
// It also owns HTTP semantics: 404 and 405 with Allow, HEAD, CORS, header
// size, and JSON bodies for every error.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/rs/cors"
	specs "github.com/toolgate/toolgate/api"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ReadyFunc reports whether the gateway can serve calls, with details.
type ReadyFunc func(ctx context.Context) (ready bool, details map[string]any)

// ErrorDomain is the ErrorInfo domain of errors the HTTP side raises.
const ErrorDomain = "toolgate"

// Defaults of Options.
const (
	DefaultSSEHeartbeat   = 15 * time.Second
	DefaultMaxHeaderBytes = 64 << 10
)

// Options configure the handler.
type Options struct {
	Logger *slog.Logger
	Ready  ReadyFunc
	// Service serves every REST call in process. It must apply the gRPC
	// server's interceptors itself (authentication, limits, log, metrics).
	Service toolgatev1.ToolServiceServer
	// MuxOptions add to grpc-gateway's mux (header matching, error
	// handlers).
	MuxOptions []runtime.ServeMuxOption
	// IncomingHeader maps request headers to incoming metadata keys for the
	// calls this package serves itself (invoke, stream), as
	// runtime.WithIncomingHeaderMatcher does for the others (default:
	// runtime.DefaultHeaderMatcher). Authorization always passes. It must
	// answer the same for the same name: each answer is kept.
	IncomingHeader func(key string) (string, bool)
	// ResponseHeader maps response metadata keys to HTTP header names for
	// streams, as runtime.WithOutgoingHeaderMatcher does for unary calls
	// (default: Grpc-Metadata-<key>).
	ResponseHeader func(key string) (string, bool)
	// SSEHeartbeat is how long an SSE stream may stay quiet before a
	// keep-alive comment is sent (DefaultSSEHeartbeat; negative: never).
	SSEHeartbeat time.Duration
	// CORSOrigins are the origins a browser may call from ("*" for any);
	// none turns CORS off.
	CORSOrigins []string
	// MaxHeaderBytes bounds a request's header lines; larger requests get
	// 431 (DefaultMaxHeaderBytes). The http.Server's own limit must be
	// higher, or it answers first, in plain text.
	MaxHeaderBytes int
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// Docs, when set, is served at /docs and below; / redirects there.
	Docs http.Handler
	// MCP, when set, is served at /mcp (the Model Context Protocol
	// endpoint); it checks its own methods.
	MCP http.Handler
}

// api is the handler New returns.
type api struct {
	opts Options
	gw   *runtime.ServeMux
	m    *marshaler
	spec http.Handler
	v2   http.Handler

	invoke     *route       // POST /v1/tools/{name}:invoke
	headerKeys sync.Map     // header name → headerKeyAnswer (headerKey)
	headerKeyN atomic.Int32 // entries in headerKeys
}

// New returns the HTTP handler.
func New(ctx context.Context, opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Service == nil {
		return nil, fmt.Errorf("httpapi: no ToolService to serve")
	}
	if opts.SSEHeartbeat == 0 {
		opts.SSEHeartbeat = DefaultSSEHeartbeat
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	a := &api{opts: opts, m: newMarshaler()}
	a.gw = runtime.NewServeMux(append([]runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, a.m),
		// A form-encoded POST must not turn into a GET.
		runtime.WithDisablePathLengthFallback(),
	}, opts.MuxOptions...)...)
	if err := toolgatev1.RegisterToolServiceHandlerServer(ctx, a.gw, opts.Service); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	// Registered after the generated handler, so it wins: grpc-gateway
	// cannot stream in process. Invoke, the busiest route, does not go
	// through the mux at all (route, invoke.go).
	if err := a.gw.HandlePath(http.MethodPost, streamPattern, a.serveStream); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	a.invoke = &route{post, http.HandlerFunc(a.serveInvokePath)}
	a.spec = specHandler(specs.Spec)
	a.v2 = specHandler(specs.SpecV2)
	var h http.Handler = a
	if len(opts.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: opts.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", "X-Api-Key", "X-Request-Id", "Traceparent", "Tracestate",
				"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"},
			ExposedHeaders: []string{"X-Request-Id", "Retry-After", "Mcp-Session-Id"},
			MaxAge:         600,
		}).Handler(h)
	}
	return h, nil
}

func specHandler(b []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

// A route is what a path allows and who serves it.
type route struct {
	allow []string // methods; GET implies HEAD
	h     http.Handler
}

var (
	get  = []string{http.MethodGet, http.MethodHead}
	post = []string{http.MethodPost}
)

// route finds the route of path, or nil.
func (a *api) route(path string) *route {
	switch path {
	case "/healthz":
		return &route{get, http.HandlerFunc(a.healthz)}
	case "/readyz":
		return &route{get, http.HandlerFunc(a.readyz)}
	case "/openapi.json", "/v1/openapi.json":
		return &route{get, a.spec}
	case "/openapi.v2.json":
		return &route{get, a.v2}
	case "/metrics":
		if a.opts.Metrics != nil {
			return &route{get, a.opts.Metrics}
		}
		return nil
	case "/":
		if a.opts.Docs != nil {
			return &route{get, http.RedirectHandler("/docs", http.StatusFound)}
		}
		return nil
	case "/v1/tools", "/v1/tool-services":
		return &route{get, a.gw}
	}
	if path == "/mcp" && a.opts.MCP != nil {
		return &route{[]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete}, a.opts.MCP}
	}
	if a.opts.Docs != nil && (path == "/docs" || strings.HasPrefix(path, "/docs/")) {
		return &route{get, a.opts.Docs}
	}
	for _, prefix := range []string{"/v1/tools/", "/v1/tool-services/"} {
		rest, ok := strings.CutPrefix(path, prefix)
		if !ok || rest == "" || strings.Contains(rest, "/") {
			continue
		}
		if prefix == "/v1/tools/" {
			if name, ok := strings.CutSuffix(rest, ":invoke"); ok && name != "" {
				return a.invoke
			}
			if strings.HasSuffix(rest, ":invoke") || strings.HasSuffix(rest, ":stream") {
				return &route{post, a.gw} // ":stream", or ":invoke" naming no tool
			}
		}
		return &route{get, a.gw}
	}
	return nil
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := headerBytes(r); n > a.opts.MaxHeaderBytes {
		writeStatus(w, http.StatusRequestHeaderFieldsTooLarge, codes.ResourceExhausted, "HEADERS_TOO_LARGE",
			fmt.Sprintf("request headers are %d bytes, more than the %d this gateway accepts", n, a.opts.MaxHeaderBytes), nil)
		return
	}
	rt := a.route(r.URL.Path)
	if rt == nil {
		writeStatus(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND",
			fmt.Sprintf("no such path: %s (the API is under /v1/; see /openapi.json)", r.URL.Path), nil)
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet // the server discards the body of a HEAD answer
	}
	allowed := false
	for _, m := range rt.allow {
		if m == method {
			allowed = true
			break
		}
	}
	if !allowed {
		allow := strings.Join(rt.allow, ", ")
		w.Header().Set("Allow", allow)
		writeStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, "METHOD_NOT_ALLOWED",
			fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow), map[string]string{"allow": allow})
		return
	}
	if r.Method != method {
		r = r.Clone(r.Context())
		r.Method = method
	}
	if r.TLS != nil {
		// In-process calls see the TLS connection as a gRPC call would:
		// a verified client certificate authenticates either way.
		r = r.WithContext(peer.NewContext(r.Context(), &peer.Peer{
			Addr:     addr(r.RemoteAddr),
			AuthInfo: credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}},
		}))
	}
	rt.h.ServeHTTP(w, r)
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
	writeJSON(w, code, map[string]any{"status": st, "details": details})
}

// headerBytes counts a request's header lines as net/http does for its
// own limit: names, values and separators.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + 12
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

func addr(s string) net.Addr {
	if ap, err := net.ResolveTCPAddr("tcp", s); err == nil {
		return ap
	}
	return tcpAddr(s)
}

// writeStatus answers an error raised by the HTTP side itself with the
// same google.rpc.Status body the API's errors have.
func writeStatus(w http.ResponseWriter, httpCode int, code codes.Code, reason, msg string, md map[string]string) {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = ds
	}
	body, err := newMarshaler().Marshal(st.Proto())
	if err != nil {
		body = []byte(fmt.Sprintf(`{"code":%d,"message":%q}`, code, msg))
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
