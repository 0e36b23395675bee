package docs_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/docs"
)

func get(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, target, nil))
	resp := rec.Result()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	h := docs.New(docs.Options{})
	for _, tc := range []struct {
		name, method, path string
		status             int
		ctype              string // in Content-Type
		contains           string
	}{
		{"try-it page", "GET", "/docs", 200, "text/html; charset=utf-8", `id="load-tools"`},
		{"try-it page, trailing slash", "GET", "/docs/", 200, "text/html; charset=utf-8", `<script src="/docs/assets/try.js" defer>`},
		{"try-it page links the reference", "GET", "/docs", 200, "text/html", `href="/docs/reference"`},
		{"try-it page links the spec", "GET", "/docs", 200, "text/html", `href="/openapi.json"`},
		{"HEAD", "HEAD", "/docs", 200, "text/html", ""},
		{"script", "GET", "/docs/assets/try.js", 200, "text/javascript; charset=utf-8", "text/event-stream"},
		{"stylesheet", "GET", "/docs/assets/try.css", 200, "text/css; charset=utf-8", ":root"},
		{"icon", "GET", "/docs/assets/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"the page names its icon", "GET", "/docs", 200, "text/html", `<link rel="icon" href="/docs/assets/favicon.svg"`},
		{"the icon where browsers look", "GET", "/favicon.ico", 200, "image/svg+xml", "<svg"},
		{"unknown asset", "GET", "/docs/assets/nope.js", 404, "application/json", "ROUTE_NOT_FOUND"},
		{"asset directory", "GET", "/docs/assets/", 404, "application/json", "ROUTE_NOT_FOUND"},
		{"template source is not served", "GET", "/docs/assets/index.html", 404, "application/json", "ROUTE_NOT_FOUND"},
		{"reference", "GET", "/docs/reference", 200, "text/html", `"swaggerJsonUrl":"/openapi.json"`},
		{"reference fits the device's width", "GET", "/docs/reference", 200, "text/html", `<meta name="viewport" content="width=device-width, initial-scale=1">`},
		{"reference, trailing slash", "GET", "/docs/reference/", 200, "text/html", `src="/docs/reference/swagger-ui-bundle.js"`},
		{"reference asset", "GET", "/docs/reference/swagger-ui-bundle.js", 200, "javascript", "SwaggerUIBundle"},
		{"reference stylesheet", "GET", "/docs/reference/swagger-ui.css", 200, "text/css", ".swagger-ui"},
		{"unknown page", "GET", "/docs/nope", 404, "application/json", "ROUTE_NOT_FOUND"},
		{"outside the prefix", "GET", "/docsx", 404, "application/json", "ROUTE_NOT_FOUND"},
		{"wrong method", "POST", "/docs", 405, "application/json", "METHOD_NOT_ALLOWED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := get(t, h, tc.method, tc.path)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: status %d, want %d; body %.200q", tc.method, tc.path, resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, tc.ctype) {
				t.Errorf("%s %s: Content-Type %q, want %q…", tc.method, tc.path, ct, tc.ctype)
			}
			if !strings.Contains(body, tc.contains) {
				t.Errorf("%s %s: body does not contain %q:\n%.500s", tc.method, tc.path, tc.contains, body)
			}
			if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow = %q, want \"GET, HEAD\"", resp.Header.Get("Allow"))
			}
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	h := docs.New(docs.Options{Path: "/help/", SpecURL: "/api/spec.json", Title: "Acme tools"})
	resp, body := get(t, h, "GET", "/help")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /help: status %d", resp.StatusCode)
	}
	for _, want := range []string{`href="/help/assets/try.css"`, `href="/help/reference"`, `href="/api/spec.json"`, "<title>Acme tools: try the tools</title>"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /help: no %q in\n%s", want, body)
		}
	}
	if resp, body = get(t, h, "GET", "/help/reference/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"swaggerJsonUrl":"/api/spec.json"`) {
		t.Errorf("GET /help/reference/: status %d, body %.300s", resp.StatusCode, body)
	}
	if resp, _ = get(t, h, "GET", "/docs"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /docs on a handler mounted at /help: status %d, want 404", resp.StatusCode)
	}
}

// attrURL finds the URLs a page loads or links to.
var attrURL = regexp.MustCompile(`(?i)\b(?:src|href|action)\s*=\s*["']([^"']*)["']`)

// TestNoExternalURLs checks that every page loads and links only paths on
// the gateway itself, and that the page's own assets name no other host.
func TestNoExternalURLs(t *testing.T) {
	t.Parallel()
	h := docs.New(docs.Options{})
	for _, page := range []string{"/docs", "/docs/reference"} {
		_, body := get(t, h, "GET", page)
		urls := attrURL.FindAllStringSubmatch(body, -1)
		if len(urls) < 3 {
			t.Fatalf("GET %s: found only %d URLs; is the pattern wrong?", page, len(urls))
		}
		for _, m := range urls {
			u := m[1]
			if !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") {
				t.Errorf("GET %s: %q is not a path on this host", page, u)
			}
		}
	}
	for _, asset := range []string{"/docs/assets/try.js", "/docs/assets/try.css"} {
		_, body := get(t, h, "GET", asset)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", " url(", ":url("} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: contains %q", asset, bad)
			}
		}
	}
	resp, _ := get(t, h, "GET", "/docs")
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
}
