package rootmux

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
}

func newRoot(t *testing.T, opts Options) http.Handler {
	t.Helper()
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Every mounted route is routed; a path of the table under another method
// gets 405 with the Allow the table derives; any other path 404; both in
// the API's JSON error form.
func TestRoutesAndAllowFromOneTable(t *testing.T) {
	t.Parallel()
	noVerb := func(p string) bool { return !strings.Contains(p, ":") }
	var routes []Route
	routes = append(routes,
		Route{Method: http.MethodGet, Pattern: "/v1/things/{name}", Handler: named("thing"), Serves: noVerb},
		Route{Method: http.MethodPost, Pattern: "/v1/things/{call}", Handler: named("verb"), Serves: func(p string) bool { return !noVerb(p) }})
	routes = append(routes, Docs(named("docs"))...)
	routes = append(routes, Metrics(named("metrics"))...)
	routes = append(routes, MCP(named("mcp"), named("set"), named("metadata"))...)
	routes = append(routes, Connect("/pkg.Service/", named("connect"))...)
	h := newRoot(t, Options{Routes: routes})
	for _, tc := range []struct {
		method, path string
		code         int
		body, allow  string
	}{
		{"GET", "/v1/things/a", 200, "thing", ""},
		{"HEAD", "/v1/things/a", 200, "", ""},
		{"POST", "/v1/things/a:go", 200, "verb", ""},
		{"PUT", "/v1/things/a", 405, "", "GET, HEAD"},
		{"PUT", "/v1/things/a:go", 405, "", "POST"},
		{"GET", "/v1/things/a/b", 404, "", ""},
		{"GET", "/docs", 200, "docs", ""},
		{"GET", "/docs/x", 200, "docs", ""},
		{"POST", "/docs/x", 405, "", "GET, HEAD"},
		{"GET", "/", 302, "", ""},
		{"POST", "/", 405, "", "GET, HEAD"},
		{"GET", "/metrics", 200, "metrics", ""},
		{"POST", "/mcp", 200, "mcp", ""},
		{"PUT", "/mcp", 405, "", "GET, HEAD, POST, DELETE"},
		{"DELETE", "/mcp/research", 200, "set", ""},
		{"OPTIONS", WellKnown[0], 200, "metadata", ""},
		{"POST", WellKnown[1], 405, "", "GET, HEAD, OPTIONS"},
		{"POST", "/pkg.Service/Call", 200, "connect", ""},
		{"GET", "/pkg.Service/Call", 405, "", "POST"},
		{"GET", "/elsewhere", 404, "", ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.code || w.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d Allow %q, want %d %q", tc.method, tc.path, w.Code, w.Header().Get("Allow"), tc.code, tc.allow)
		}
		if tc.code == 200 && tc.method != "HEAD" && w.Body.String() != tc.body {
			t.Errorf("%s %s: served by %q, want %q", tc.method, tc.path, w.Body.String(), tc.body)
		}
		if tc.code >= 400 {
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Message == "" || w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: error body %q is not the JSON status (%v)", tc.method, tc.path, w.Body.String(), err)
			}
		}
	}
}

// What is not mounted is not routed, nor listed in Allow.
func TestNothingMountedIsNotFound(t *testing.T) {
	t.Parallel()
	routes := append(Docs(nil), Metrics(nil)...)
	routes = append(routes, MCP(nil, named("set"), nil)...)
	routes = append(routes, Connect("/pkg.Service/", nil)...)
	if len(routes) != 0 {
		t.Fatalf("%d routes of nil handlers", len(routes))
	}
	h := newRoot(t, Options{Routes: routes})
	for _, path := range []string{"/", "/docs", "/metrics", "/mcp", "/mcp/x", WellKnown[0], "/pkg.Service/Call"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
		if w.Code != http.StatusNotFound {
			t.Errorf("POST %s: HTTP %d, want 404", path, w.Code)
		}
	}
}

// Header lines over the bound get 431 in JSON, except on the routes that
// check their own.
func TestHeaderBound(t *testing.T) {
	t.Parallel()
	routes := append([]Route{{Method: http.MethodGet, Pattern: "/v1/x", Handler: named("x")}}, MCP(named("mcp"), nil, nil)...)
	h := newRoot(t, Options{Routes: routes, MaxHeaderBytes: 1024})
	for req, want := range map[string]int{
		"GET /v1/x": http.StatusRequestHeaderFieldsTooLarge, "GET /elsewhere": http.StatusRequestHeaderFieldsTooLarge,
		"PUT /v1/x": http.StatusRequestHeaderFieldsTooLarge, "GET /mcp": http.StatusOK, "PUT /mcp": http.StatusMethodNotAllowed,
	} {
		method, path, _ := strings.Cut(req, " ")
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-Big", strings.Repeat("b", 2000))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s with big headers: HTTP %d, want %d", req, w.Code, want)
		}
	}
}

// A request is routed once: the other routes of the table (MCP's and
// Connect's among them, which bound their own headers) cost a routed
// request no allocation.
func TestRoutedOnce(t *testing.T) {
	rest := Route{Method: http.MethodPost, Pattern: "/v1/things/{call}", Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	all := []Route{rest}
	all = append(all, Docs(named("docs"))...)
	all = append(all, Metrics(named("metrics"))...)
	all = append(all, MCP(named("mcp"), named("set"), named("metadata"))...)
	all = append(all, Connect("/pkg.Service/", named("connect"))...)
	allocs := func(routes []Route) float64 {
		h := newRoot(t, Options{Routes: routes, MaxHeaderBytes: 1024})
		r := httptest.NewRequest(http.MethodPost, "/v1/things/a:go", nil)
		w := httptest.NewRecorder()
		return testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) })
	}
	alone, inTable := allocs([]Route{rest}), allocs(all)
	if inTable > alone {
		t.Errorf("a routed request: %.0f allocations with the whole table, %.0f with its route alone", inTable, alone)
	}
}

// CORS answers a preflight from an allowed origin only.
func TestCORS(t *testing.T) {
	t.Parallel()
	h := newRoot(t, Options{Routes: []Route{{Method: http.MethodPost, Pattern: "/v1/x", Handler: named("x")}}, CORSOrigins: []string{"http://ok.example"}})
	for origin, allowed := range map[string]bool{"http://ok.example": true, "http://other.example": false} {
		r := httptest.NewRequest(http.MethodOptions, "/v1/x", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("Access-Control-Allow-Origin") == origin; got != allowed {
			t.Errorf("preflight from %s: allowed %v, want %v", origin, got, allowed)
		}
	}
}

func TestBadRouteRefused(t *testing.T) {
	t.Parallel()
	for _, routes := range [][]Route{
		{{Method: http.MethodGet, Pattern: "/x"}},
		{{Method: http.MethodGet, Pattern: "/x", Handler: named("a")}, {Method: http.MethodGet, Pattern: "/x", Handler: named("b")}},
	} {
		if _, err := New(Options{Routes: routes}); err == nil {
			t.Errorf("%+v: accepted", routes)
		}
	}
}
