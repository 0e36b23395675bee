package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/toolgate/toolgate/wire"
)

// adminHandler serves the operational endpoints on the admin listener
// (--admin-addr), apart from the public one: the metrics, readiness with
// every detail ready reports (registry conflicts, file paths, topics), and
// the Go profiles. Nothing here asks for credentials: the listener is on
// loopback unless an operator puts it on a network of their choosing.
func (g *Gateway) adminHandler() http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", g.metrics.Handler())
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeAdminJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	m.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, details := g.ready(r.Context())
		code, st := http.StatusOK, "ready"
		if !ok {
			code, st = http.StatusServiceUnavailable, "not ready"
		}
		writeAdminJSON(w, code, map[string]any{"status": st, "details": details})
	})
	if g.callers != nil {
		m.Handle("GET "+wire.CallerJWKSPath, g.callers.Handler())
	}
	m.HandleFunc("GET /debug/pprof/", pprof.Index)
	m.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	m.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAdminJSON(w, http.StatusNotFound, map[string]any{"error": "no such path on the admin listener: " + r.URL.Path +
			" (it serves /metrics, /readyz, /healthz and /debug/pprof/)"})
	})
	return m
}

// publicReady is readiness as the public listener tells it: the status
// only; the details are the admin listener's.
func (g *Gateway) publicReady(ctx context.Context) (bool, map[string]any) {
	ok, _ := g.ready(ctx)
	return ok, nil
}

func writeAdminJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
