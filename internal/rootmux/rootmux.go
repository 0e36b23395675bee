// Package rootmux is the gateway's root HTTP handler. One route table
// sends each request to what serves it — the REST door, the MCP and
// Connect doors, the docs, the metrics — and the same table answers what
// no route takes: 405 with the Allow it derives when the path is one of
// its routes' under another method, else 404, both in the API's JSON
// error form (httpstatus). Around the routes it bounds a request's header
// lines (431) for the handlers that do not check their own, and answers
// CORS.
package rootmux

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rs/cors"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/httpstatus"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/status"
)

// Route is one entry of the route table.
type Route struct {
	// Method is the request method; GET serves HEAD too.
	Method string
	// Pattern is the path pattern, as http.ServeMux takes it (without a
	// method): "/v1/tools/{name}", "/docs/" (a subtree), "/{$}" (the root
	// only).
	Pattern string
	Handler http.Handler
	// Serves, when set, narrows the paths of Pattern for which the route
	// counts in the Allow of a 405 (a handler that tells paths apart
	// within its pattern, such as a REST name with or without a verb);
	// nil: every path of Pattern.
	Serves func(path string) bool
	// OwnHeaders: the handler checks its requests' header size itself,
	// to answer in its own form (MCP, Connect); the root does not.
	OwnHeaders bool
}

// Options configure the root handler.
type Options struct {
	Logger *slog.Logger
	// Routes is the route table.
	Routes []Route
	// CORSOrigins are the origins a browser may call from ("*" for any);
	// none turns CORS off.
	CORSOrigins []string
	// MaxHeaderBytes bounds a request's header lines; larger requests get
	// 431 (<= 0: no bound), unless their route has OwnHeaders. The
	// http.Server's own limit must be higher, or it answers first, in
	// plain text.
	MaxHeaderBytes int
}

// Mux is the root handler (New).
type Mux struct {
	opts  Options
	mux   *http.ServeMux
	paths []routePath
}

// routePath matches the paths of one route, whatever the method.
type routePath struct {
	route Route
	match *http.ServeMux // Pattern alone, to matched
}

// matched is the handler of a routePath's mux: a path it returns is one
// of the route's.
var matched http.Handler = &marker{}

type marker struct{}

func (*marker) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New returns the root handler of opts.Routes.
func New(opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Mux{opts: opts, mux: http.NewServeMux()}
	for _, r := range opts.Routes {
		if r.Method == "" || r.Pattern == "" || r.Handler == nil {
			return nil, fmt.Errorf("rootmux: route %q %q without a method, pattern or handler", r.Method, r.Pattern)
		}
		h := r.Handler
		if !r.OwnHeaders {
			h = m.boundHeaders(h)
		}
		if err := register(m.mux, r.Method+" "+r.Pattern, h); err != nil {
			return nil, err
		}
		p := routePath{route: r, match: http.NewServeMux()}
		p.match.Handle(r.Pattern, matched)
		m.paths = append(m.paths, p)
	}
	m.mux.HandleFunc("/", m.unrouted)
	var h http.Handler = m
	if len(opts.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: opts.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", "X-Api-Key", "X-Request-Id", "Traceparent", "Tracestate",
				"Idempotency-Key", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id",
				"Connect-Protocol-Version", "Connect-Timeout-Ms", "Grpc-Timeout", "X-Grpc-Web", "X-User-Agent"},
			ExposedHeaders: []string{"X-Request-Id", "Retry-After", "Mcp-Session-Id", "Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"},
			MaxAge:         600,
		}).Handler(h)
	}
	return h, nil
}

// register is mux.Handle, its panic on a bad or conflicting pattern an
// error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rootmux: route %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// matches reports whether path is one of p's.
func (p routePath) matches(path string) bool {
	h, _ := p.match.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: path}})
	return h == matched && (p.route.Serves == nil || p.route.Serves(path))
}

func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// boundHeaders is h behind the bound on a request's header lines: a
// route's handler that does not check them itself is wrapped in it once,
// so a request is routed once and its path compared with no other route.
func (m *Mux) boundHeaders(h http.Handler) http.Handler {
	if m.opts.MaxHeaderBytes <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.headersFit(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headersFit answers 431 and reports false when r's header lines exceed
// MaxHeaderBytes.
func (m *Mux) headersFit(w http.ResponseWriter, r *http.Request) bool {
	if m.opts.MaxHeaderBytes <= 0 {
		return true
	}
	n := httpcall.HeaderBytes(r)
	if n <= m.opts.MaxHeaderBytes {
		return true
	}
	m.opts.Logger.InfoContext(r.Context(), "request refused: headers too large", "method", r.Method, "path", r.URL.Path,
		"peer", r.RemoteAddr, "bytes", n, "limit", m.opts.MaxHeaderBytes)
	w.Header().Set("Connection", "close")
	httpstatus.WriteOf(w, http.StatusRequestHeaderFieldsTooLarge, status.Convert(toolcall.HeadersTooLarge(n, m.opts.MaxHeaderBytes)))
	return false
}

// checksOwnHeaders reports whether path is a route's whose handler
// checks its requests' headers itself. It is asked only for requests no
// route takes (404 or 405), so that the bound on those is what it is on
// their path's routes.
func (m *Mux) checksOwnHeaders(path string) bool {
	for _, p := range m.paths {
		if p.route.OwnHeaders && p.matches(path) {
			return true
		}
	}
	return false
}

// unrouted answers a request no route takes: 405 with Allow when the path
// is a route's under another method, else 404.
func (m *Mux) unrouted(w http.ResponseWriter, r *http.Request) {
	if m.opts.MaxHeaderBytes > 0 && !m.checksOwnHeaders(r.URL.Path) && !m.headersFit(w, r) {
		return
	}
	if allow := m.Allowed(r.URL.Path); allow != "" {
		httpstatus.NotAllowed(w, r, allow)
		return
	}
	httpstatus.NotFound(w, fmt.Sprintf("no such path: %s (the API is under /v1/; see /openapi.json)", r.URL.Path))
}

// methodOrder is the order of the methods in Allow.
var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// Allowed lists the methods the routes take on path ("GET, HEAD, POST"),
// "" for a path that is no route's.
func (m *Mux) Allowed(path string) string {
	var methods []string
	add := func(method string) {
		if !slices.Contains(methods, method) {
			methods = append(methods, method)
		}
	}
	for _, p := range m.paths {
		if !p.matches(path) {
			continue
		}
		add(p.route.Method)
		if p.route.Method == http.MethodGet {
			add(http.MethodHead)
		}
	}
	slices.SortStableFunc(methods, func(a, b string) int { return rank(a) - rank(b) })
	return strings.Join(methods, ", ")
}

func rank(method string) int {
	if i := slices.Index(methodOrder, method); i >= 0 {
		return i
	}
	return len(methodOrder)
}
