// Package httpapi serves toolgate's REST side: grpc-gateway's translation of
// HTTP/JSON to the ToolService (unary methods in process when a local server
// is given, streaming through a connection to the gateway's own gRPC
// server), health endpoints and the OpenAPI document.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/api"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// streamSuffix ends the path of the one streaming method, StreamTool.
const streamSuffix = ":stream"

// ReadyFunc reports whether the gateway can serve calls, with details.
type ReadyFunc func(ctx context.Context) (ready bool, details map[string]any)

// Options configure the handler.
type Options struct {
	Logger *slog.Logger
	Ready  ReadyFunc
	// MuxOptions add to grpc-gateway's mux (header matching, error
	// handlers).
	MuxOptions []runtime.ServeMuxOption
	// Metrics, when set, is served at GET /metrics.
	Metrics http.Handler
	// Local, when set, serves the unary methods in process instead of
	// through conn; it must apply the gRPC server's interceptors itself.
	// Streaming methods always go through conn.
	Local toolgatev1.ToolServiceServer
	// MCP, when set, is served at /mcp (the Model Context Protocol
	// endpoint).
	MCP http.Handler
}

// New returns the HTTP handler. conn is a client connection to the gateway's
// own gRPC server.
func New(ctx context.Context, conn *grpc.ClientConn, opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	marshaler := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
	newMux := func() *runtime.ServeMux {
		return runtime.NewServeMux(append([]runtime.ServeMuxOption{
			runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		}, opts.MuxOptions...)...)
	}
	remote := newMux()
	if err := toolgatev1.RegisterToolServiceHandler(ctx, remote, conn); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	var tools http.Handler = remote
	if opts.Local != nil {
		local := newMux()
		if err := toolgatev1.RegisterToolServiceHandlerServer(ctx, local, opts.Local); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		tools = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, streamSuffix) {
				remote.ServeHTTP(w, r)
				return
			}
			local.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", tools)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, details := true, map[string]any{}
		if opts.Ready != nil {
			ok, details = opts.Ready(r.Context())
		}
		code, st := http.StatusOK, "ready"
		if !ok {
			code, st = http.StatusServiceUnavailable, "not ready"
		}
		writeJSON(w, code, map[string]any{"status": st, "details": details})
	})
	spec := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(api.Spec)
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.MCP != nil {
		mux.Handle("/mcp", opts.MCP)
	}
	mux.HandleFunc("GET /openapi.json", spec)
	mux.HandleFunc("GET /v1/openapi.json", spec)
	return mux, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
