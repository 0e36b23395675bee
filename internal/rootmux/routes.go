package rootmux

import "net/http"

// The routes of what the gateway mounts beside the REST door (whose
// routes are httpapi's). A nil handler gives no route.

// Docs are the /docs pages' routes; / leads a person there.
func Docs(h http.Handler) []Route {
	if h == nil {
		return nil
	}
	return []Route{
		{Method: http.MethodGet, Pattern: "/{$}", Handler: http.RedirectHandler("/docs", http.StatusFound)},
		{Method: http.MethodGet, Pattern: "/docs", Handler: h},
		{Method: http.MethodGet, Pattern: "/docs/", Handler: h},
		{Method: http.MethodGet, Pattern: "/favicon.ico", Handler: h}, // the pages' icon: browsers ask on every load
	}
}

// Metrics serves h at GET /metrics.
func Metrics(h http.Handler) []Route {
	if h == nil {
		return nil
	}
	return []Route{{Method: http.MethodGet, Pattern: "/metrics", Handler: h}}
}

// WellKnown are the paths of the MCP endpoint's OAuth protected resource
// metadata (RFC 9728): the form for a resource at /mcp, and the one
// without the path.
var WellKnown = [2]string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}

// MCP serves the MCP endpoint at /mcp (it checks its own methods and
// headers), each tool set's at /mcp/{set} (sets), and the endpoint's
// resource metadata at WellKnown (metadata). A nil handler leaves its
// routes out; with no endpoint, there are no sets either.
func MCP(endpoint, sets, metadata http.Handler) []Route {
	var routes []Route
	if endpoint != nil {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			routes = append(routes, Route{Method: method, Pattern: "/mcp", Handler: endpoint, OwnHeaders: true})
			if sets != nil {
				routes = append(routes, Route{Method: method, Pattern: "/mcp/{set}", Handler: sets})
			}
		}
	}
	if metadata != nil {
		for _, p := range WellKnown {
			routes = append(routes, Route{Method: http.MethodGet, Pattern: p, Handler: metadata},
				Route{Method: http.MethodOptions, Pattern: p, Handler: metadata}) // browsers' preflight
		}
	}
	return routes
}

// Connect serves POST requests under path (the Connect door: Connect,
// gRPC-Web and gRPC; it checks its own headers).
func Connect(path string, h http.Handler) []Route {
	if h == nil {
		return nil
	}
	return []Route{{Method: http.MethodPost, Pattern: path, Handler: h, OwnHeaders: true}}
}
