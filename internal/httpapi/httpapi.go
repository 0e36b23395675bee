// Package httpapi serves toolgate's REST side: grpc-gateway's translation of
// HTTP/JSON to the gRPC server (dialled over a real connection, so streaming
// and interceptors work as for any gRPC client), health endpoints and the
// OpenAPI document.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/api"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

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
	gw := runtime.NewServeMux(append([]runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
	}, opts.MuxOptions...)...)
	if err := toolgatev1.RegisterToolServiceHandler(ctx, gw, conn); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
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
	mux.HandleFunc("GET /openapi.json", spec)
	mux.HandleFunc("GET /v1/openapi.json", spec)
	return mux, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
