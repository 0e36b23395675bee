// Package httpapi is the REST door. Its routes (Go's http.ServeMux method
// patterns, mounted by the root mux, rootmux) turn each request into a
// toolcall.Call and run it through the call handler — the middleware every
// door shares, then the core: POST /v1/tools/{name}:invoke answers the
// output as JSON, :stream writes the chunks as NDJSON or Server-Sent
// Events as they arrive, and the listing GETs answer the API's messages in
// grpc-gateway's JSON form. Errors are the google.rpc.Status JSON with the
// HTTP status grpc-gateway maps the gRPC code to (httpstatus). It also
// serves health, readiness and the OpenAPI documents, and owns the REST
// API's HTTP semantics: HEAD, media types (one Accept rule for every API
// answer, 406 and 415; media.go), and JSON bodies for every error.
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
	specs "github.com/toolgate/toolgate/api"
	"github.com/toolgate/toolgate/internal/doorconf"
	"github.com/toolgate/toolgate/internal/httpstatus"
	"github.com/toolgate/toolgate/internal/openapi31"
	"github.com/toolgate/toolgate/internal/rootmux"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

// ReadyFunc reports whether the gateway can serve calls, with details;
// nil details leave them out of /readyz's answer.
type ReadyFunc func(ctx context.Context) (ready bool, details map[string]any)

// ErrorDomain is the ErrorInfo domain of errors the HTTP side raises.
const ErrorDomain = httpstatus.ErrorDomain

// DefaultSSEHeartbeat is the default of Options.SSEHeartbeat.
const DefaultSSEHeartbeat = doorconf.SSEHeartbeat

// Options configure the REST door.
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
	// Operations says the gateway serves durable operations
	// (--operations): only then do the OpenAPI documents list StartTool
	// and the routes of /v1/operations.
	Operations bool
}

// API is the REST door New returns; Routes are what the root mux mounts.
type API struct {
	opts Options
	// The OpenAPI documents served: the committed ones, less what this
	// gateway does not serve.
	spec, specV2 []byte
	gw           *runtime.ServeMux // holds the error handler runtime.HTTPError uses
	m            *marshaler
}

// New returns the REST door.
func New(opts Options) (*API, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Handler == nil {
		return nil, fmt.Errorf("httpapi: no call handler to serve")
	}
	if opts.SSEHeartbeat == 0 {
		opts.SSEHeartbeat = DefaultSSEHeartbeat
	}
	a := &API{opts: opts, m: newMarshaler(), spec: specs.Spec, specV2: specs.SpecV2}
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
	return a, nil
}

// Routes are the REST door's routes. A route whose pattern holds a name
// or id with or without a verb (":invoke", ":cancel") says which of them
// it serves, for the root mux's Allow.
func (a *API) Routes() []rootmux.Route {
	const get, post, del = http.MethodGet, http.MethodPost, http.MethodDelete
	hasVerb := func(prefix string, split func(string) (string, string)) func(string) bool {
		return func(path string) bool {
			_, verb := split(strings.TrimPrefix(path, prefix))
			return verb != ""
		}
	}
	toolVerb := hasVerb("/v1/tools/", splitVerb)
	opVerb := hasVerb("/v1/operations/", splitOpVerb)
	opStream := func(path string) bool { return strings.HasSuffix(path, ":"+verbStream) }
	spec, v2 := specHandler(a.spec), specHandler(a.specV2)
	f := func(method, pattern string, h http.HandlerFunc, serves func(string) bool) rootmux.Route {
		return rootmux.Route{Method: method, Pattern: pattern, Handler: h, Serves: serves}
	}
	return []rootmux.Route{
		f(get, "/v1/tools", a.listTools, nil),
		f(get, "/v1/tools/{name}", a.getTool, not(toolVerb)),
		f(post, "/v1/tools/{call}", a.toolVerb, toolVerb),
		f(get, "/v1/operations", a.listOperations, nil),
		f(get, "/v1/operations/{id}", a.getOperation, not(opVerb)),
		f(del, "/v1/operations/{id}", a.deleteOperation, func(p string) bool { return !opVerb(p) && !opStream(p) }),
		f(post, "/v1/operations/{call}", a.operationVerb, opVerb),
		f(get, "/v1/tool-services", a.listServices, nil),
		f(get, "/v1/tool-services/{id}", a.getService, nil),
		f(get, "/healthz", a.healthz, nil),
		f(get, "/readyz", a.readyz, nil),
		{Method: get, Pattern: "/openapi.json", Handler: spec},
		{Method: get, Pattern: "/v1/openapi.json", Handler: spec},
		{Method: get, Pattern: "/openapi.v2.json", Handler: v2},
	}
}

func not(f func(string) bool) func(string) bool { return func(s string) bool { return !f(s) } }

func specHandler(b []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

func notAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	httpstatus.NotAllowed(w, r, allow)
}

func (a *API) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
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
	httpstatus.Write(w, httpCode, code, reason, msg, md)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
